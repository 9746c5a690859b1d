"""PostgreSQL: a claim's cost does not grow with the backlog. The plan is
checked, not a timing: the claim's index scan must stop at "now", so items that
are scheduled or in flight are never read, let alone filtered one by one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

import onceonly
from onceonly.stores.postgres import SQL

BACKLOG = 5_000
LIMIT = 25
postgres_only = pytest.mark.parametrize("store_url", ["postgres"], indirect=True)


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def explain_claim(url: str, queue: str) -> list[dict[str, Any]]:
    """The claim statement's executed plan nodes (EXPLAIN ANALYZE runs it, so it
    is rolled back: the queue is left as it was)."""
    params = {"queue": queue, "owner": "explain", "limit": LIMIT, "lease": 60.0}
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction(force_rollback=True):
        row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + SQL["claim"], params).fetchone()
    assert row is not None
    document = row[0] if not isinstance(row[0], Jsonb) else row[0].obj
    return list(_nodes(document[0]["Plan"]))


def rows_read(nodes: list[dict[str, Any]]) -> int:
    """Rows the plan's scans of the queue table produced or filtered away."""
    scans = [n for n in nodes if n.get("Relation Name") == "onceonly_queue" and "Scan" in n["Node Type"]]
    assert scans, nodes
    return sum((n["Actual Rows"] + n.get("Rows Removed by Filter", 0)) * n["Actual Loops"] for n in scans)


@postgres_only
def test_claim_reads_no_scheduled_or_in_flight_item(postgres_url: str, store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    later = time.time() + 3600
    q.put_many((f"future-{i}", later + i, None) for i in range(BACKLOG))
    q.put_many((f"held-{i}", None, None) for i in range(LIMIT))
    assert len(q.claim(limit=LIMIT, lease=3600)) == LIMIT  # in flight: lease expiry in the future
    q.put_many((f"due-{i}", time.time() - 60, None) for i in range(3))

    nodes = explain_claim(postgres_url, unique)
    # The 3 due items, found once to lock them and once to update them.
    assert rows_read(nodes) == 2 * 3, nodes
    assert q.depth() == onceonly.QueueDepth(due=3, scheduled=BACKLOG, in_flight=LIMIT)


@postgres_only
def test_claim_on_a_backlog_with_nothing_due_reads_nothing(postgres_url: str, store: onceonly.Store,
                                                           unique: str) -> None:
    q = store.queue(unique)
    later = time.time() + 3600
    q.put_many((f"future-{i}", later + i, None) for i in range(BACKLOG))
    assert rows_read(explain_claim(postgres_url, unique)) == 0
    assert q.claim(limit=LIMIT, lease=60) == []
