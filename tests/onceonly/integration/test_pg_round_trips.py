"""PostgreSQL: one statement per store operation (in one round trip with its
statement bound), and nothing else on the wire while the link is quiet (no
ping on each pool checkout)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import onceonly
from onceonly.stores.postgres import PLAN_SETTINGS, SQL
from onceonly.stores.postgres.connection import BOUND_THIS_TRANSACTION
from onceonly.stores.postgres.queue import PUT_BATCH

PLAN_SETTING_STATEMENTS = {SQL[name] for name in PLAN_SETTINGS.values()}


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every statement any psycopg cursor of this process sends (the pool's
    checkout check included: it is conn.execute, a cursor underneath), except
    the statement bound and the planner settings that share its pipeline: a
    store statement is listed as itself only when it went in one pipeline (one
    sync: one round trip) right after its statement bound
    (``set_config('statement_timeout', …, true)``), else marked UNBOUNDED; a
    planner setting is listed only when it went elsewhere."""
    sent: list[str] = []
    bounded_pipelines: dict[int, object] = {}
    execute = psycopg.Cursor.execute

    def counting(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        conn, text = self.connection, str(query)
        if text == BOUND_THIS_TRANSACTION:
            bounded_pipelines[id(conn)] = conn._pipeline
        elif text in PLAN_SETTING_STATEMENTS:
            if conn._pipeline is None or bounded_pipelines.get(id(conn)) is not conn._pipeline:
                sent.append(f"UNBOUNDED: {text}")
        else:
            pipeline = bounded_pipelines.pop(id(conn), None)
            sent.append(text if pipeline is not None and pipeline is conn._pipeline else f"UNBOUNDED: {text}")
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counting)
    yield sent


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_one_statement_per_operation(store: onceonly.Store, unique: str, statements: list[str]) -> None:
    q = store.queue(unique)
    q.put("warm-up")  # the pool's first connection is opened here
    statements.clear()

    assert q.put_many((f"i{i}", time.time() - 1, None) for i in range(PUT_BATCH + 5)) == PUT_BATCH + 5
    assert statements == [SQL["put_many"]] * 2  # one per PUT_BATCH items
    statements.clear()

    for _ in range(3):
        claims = q.claim(limit=25, lease=60)
        assert len(claims) == 25 and all(q.ack_many(claims))
    assert statements == [SQL["claim"]] * 6  # claim, and ack_many, are one statement each
    statements.clear()

    # A worker loop: the previous batch's acks ride on the next claim.
    claims = q.claim(limit=25, lease=60)
    for _ in range(3):
        claims = q.claim(limit=25, lease=60, acks=claims)
        assert len(claims) == 25 and claims.acked == [True] * 25
    assert statements == [SQL["claim"]] * 4


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_put_many_statements_are_bounded_in_bytes(store: onceonly.Store, unique: str,
                                                  statements: list[str]) -> None:
    q = store.queue(unique)
    q.put("warm-up")
    statements.clear()
    big = "x" * 200_000  # 100 of them: 20 MB of payload
    assert q.put_many((f"big{i}", None, big) for i in range(100)) == 100
    assert statements == [SQL["put_many"]] * 3  # 41 + 41 + 18: under 8 MB each
    assert q.depth().due == 101
