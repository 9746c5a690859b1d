"""PostgreSQL: a claim's cost does not grow with the backlog, nor does an ack's
or a lookup by id. Plans are checked, not timings: the statements run under
EXPLAIN ANALYZE (rolled back) and the rows their scans of the queue table read
are counted, with statistics that do not know the queue yet (it grew since the
last ANALYZE, the case where a planner guesses "one row" and may walk the
whole queue, or takes a bitmap scan that reads every due item to sort them),
with both the custom plans of the first executions and the generic plan
psycopg's prepared statements switch to. The statements run under the
planner settings the store sends before them (PLAN_SETTINGS); one test
checks, through the store's own claim, that it does send them."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pytest

import onceonly
from onceonly.stores.postgres import PLAN_SETTINGS, SQL
from tests.support.servers.scratch import scratch_database

BACKLOG = 5_000
LIMIT = 25
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
pytestmark = pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
plans = pytest.mark.parametrize("generic", [False, True], ids=["custom-plan", "generic-plan"])


@pytest.fixture
def stale_stats(postgres_url: str, store: onceonly.Store) -> None:
    """Statistics taken before the test's queue exists."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("ANALYZE onceonly_queue")


@pytest.fixture
def empty_stats_database(store_url: str, postgres_server_url: str) -> Iterator[tuple[str, onceonly.Store]]:
    """A database of its own whose statistics were taken while the queue table
    was empty: the planner then rates a queue at a handful of rows, and
    without the store's planner settings it reads a due backlog whole with a
    bitmap scan."""
    with scratch_database(postgres_server_url, "onceonly_empty_stats") as url:
        store = onceonly.connect(url)
        store.setup()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ANALYZE onceonly_queue")
        try:
            yield url, store
        finally:
            store.close()


def ready_index_entries_read(url: str) -> int:
    """Entries read from the claim index so far, as the server's statistics
    count them (a backend reports its counts when it goes idle or exits)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT idx_tup_read FROM pg_stat_user_indexes"
                           " WHERE indexrelname = 'onceonly_queue_ready'").fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def bloated_database(store_url: str, postgres_server_url: str) -> Iterator[tuple[str, onceonly.Store]]:
    """A database of its own whose claim index is many times the primary key's
    size, as a queue's churn leaves it (each claim adds an entry for the new
    claimable_at; the primary key's entries for one id are cleaned up in
    place), with statistics taken before the test's queue exists."""
    with scratch_database(postgres_server_url, "onceonly_bloated") as url:
        store = onceonly.connect(url)
        store.setup()
        store.queue("churn").put_many((f"c-{i}", 0.0, None) for i in range(2_000))
        with psycopg.connect(url, autocommit=True) as conn:
            for _ in range(150):
                conn.execute("UPDATE onceonly_queue SET claimable_at = claimable_at + interval '1 ms'")
            conn.execute("DELETE FROM onceonly_queue")
            conn.execute("ANALYZE onceonly_queue")
            pages: dict[str, int] = dict(conn.execute(
                "SELECT relname, relpages FROM pg_class WHERE relname LIKE 'onceonly_queue_%'"))
        assert pages["onceonly_queue_ready"] > 6 * pages["onceonly_queue_pkey"], pages
        try:
            yield url, store
        finally:
            store.close()


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def explain(url: str, statement: str, params: dict[str, Any], *, generic: bool) -> list[dict[str, Any]]:
    """The executed plan nodes of one of the store's statements; rolled back,
    so the queue is left as it was."""
    sql = SQL[statement]
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction(force_rollback=True):
        cur = psycopg.ClientCursor(conn)  # values inlined: EXECUTE takes no bound parameters
        if statement in PLAN_SETTINGS:
            conn.execute(SQL[PLAN_SETTINGS[statement]])
        if generic:
            names = list(dict.fromkeys(_PLACEHOLDER.findall(sql)))
            conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            conn.execute("PREPARE explained AS " + _PLACEHOLDER.sub(lambda m: f"${names.index(m[1]) + 1}", sql))
            cur.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE explained({', '.join(['%s'] * len(names))})",
                        [params[name] for name in names])
        else:
            cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        row = cur.fetchone()
    assert row is not None
    return list(_nodes(row[0][0]["Plan"]))


def explain_claim(url: str, queue: str, *, acks: Sequence[onceonly.Claim] = (), limit: int = LIMIT,
                  generic: bool = False) -> list[dict[str, Any]]:
    """The store's claim statement, which also acks (limit 0: ack_many)."""
    params = {"queue": queue, "owner": "explain", "limit": limit, "lease": 60.0,
              "item_ids": [c.item_id for c in acks], "tokens": [c.token for c in acks],
              "owners": [c.owner for c in acks]}
    return explain(url, "claim", params, generic=generic)


def rows_read(nodes: list[dict[str, Any]]) -> int:
    """Rows the plan's scans of the queue table produced or filtered away."""
    scans = [n for n in nodes if n.get("Relation Name") == "onceonly_queue" and "Scan" in n["Node Type"]]
    assert scans, nodes
    return sum((n["Actual Rows"] + n.get("Rows Removed by Filter", 0)) * n["Actual Loops"] for n in scans)


def put_backlog(q: onceonly.Queue, prefix: str, due_at: float, count: int = BACKLOG) -> None:
    """``count`` items due from ``due_at`` on, a millisecond apart."""
    q.put_many((f"{prefix}-{i}", due_at + i / 1000, None) for i in range(count))


@plans
def test_claim_reads_no_scheduled_or_in_flight_item(postgres_url: str, store: onceonly.Store, unique: str,
                                                    stale_stats: None, generic: bool) -> None:
    q = store.queue(unique)
    put_backlog(q, "future", time.time() + 3600)
    put_backlog(q, "held", time.time() - 60, LIMIT)
    assert len(q.claim(limit=LIMIT, lease=3600)) == LIMIT  # in flight: lease expiry in the future
    put_backlog(q, "due", time.time() - 60, 3)

    nodes = explain_claim(postgres_url, unique, generic=generic)
    # The 3 due items, found once to lock them and once to update them.
    assert rows_read(nodes) == 2 * 3, nodes
    assert q.depth() == onceonly.QueueDepth(due=3, scheduled=BACKLOG, in_flight=LIMIT)


@plans
def test_claim_reads_no_other_item_when_the_claim_index_is_bloated(
        bloated_database: tuple[str, onceonly.Store], unique: str, generic: bool) -> None:
    """With the queue's name in the primary key's collation, a planner that
    rates both indexes at one row takes the smaller one, the primary key, and
    filters the whole queue by due time; in the "C" collation only the claim
    index can serve the claim."""
    url, store = bloated_database
    q = store.queue(unique)
    put_backlog(q, "future", time.time() + 3600)
    put_backlog(q, "due", time.time() - 60, 3)
    assert rows_read(explain_claim(url, unique, generic=generic)) == 2 * 3


@plans
def test_claim_reads_only_what_it_takes_from_a_due_backlog(postgres_url: str, store: onceonly.Store, unique: str,
                                                           stale_stats: None, generic: bool) -> None:
    q = store.queue(unique)
    put_backlog(q, "due", time.time() - 60)
    assert rows_read(explain_claim(postgres_url, unique, generic=generic)) == 2 * LIMIT


@plans
def test_claim_reads_only_what_it_takes_when_the_statistics_saw_an_empty_queue(
        empty_stats_database: tuple[str, onceonly.Store], unique: str, generic: bool) -> None:
    url, store = empty_stats_database
    put_backlog(store.queue(unique), "due", time.time() - 60)
    assert rows_read(explain_claim(url, unique, generic=generic)) == 2 * LIMIT


def test_the_stores_own_claim_walks_the_claim_index_in_due_order(
        empty_stats_database: tuple[str, onceonly.Store], unique: str) -> None:
    """The store's claim, not the statement alone: it reads the claim index's
    entries up to its limit, not the whole due backlog (a bitmap scan reads
    them all). Counted by the server once the claiming backend has exited."""
    url, store = empty_stats_database
    put_backlog(store.queue(unique), "due", time.time() - 60)
    claimer = onceonly.connect(url)
    before = ready_index_entries_read(url)
    try:
        assert len(claimer.queue(unique).claim(limit=LIMIT, lease=60)) == LIMIT
    finally:
        claimer.close()
    deadline = time.monotonic() + 15
    while (read := ready_index_entries_read(url) - before) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert 0 < read <= 2 * LIMIT, f"the claim read {read} entries of the claim index to take {LIMIT}"


@plans
def test_claim_on_a_backlog_with_nothing_due_reads_nothing(postgres_url: str, store: onceonly.Store, unique: str,
                                                           stale_stats: None, generic: bool) -> None:
    q = store.queue(unique)
    put_backlog(q, "future", time.time() + 3600)
    assert rows_read(explain_claim(postgres_url, unique, generic=generic)) == 0
    assert q.claim(limit=LIMIT, lease=60) == []


@plans
def test_ack_and_lookups_by_id_read_their_rows_only(postgres_url: str, store: onceonly.Store, unique: str,
                                                    stale_stats: None, generic: bool) -> None:
    q = store.queue(unique)
    put_backlog(q, "due", time.time() - 60)
    claims = q.claim(limit=3, lease=60)
    # Each claim looked up once by primary key, then deleted by ctid.
    assert rows_read(explain_claim(postgres_url, unique, acks=claims, limit=0, generic=generic)) == 2 * 3
    # claim(acks=...): the same, plus the 25 items taken, read twice.
    assert rows_read(explain_claim(postgres_url, unique, acks=claims, generic=generic)) == 2 * 3 + 2 * LIMIT
    first = claims[0]
    retry = {"queue": unique, "item_id": first.item_id, "token": first.token, "owner": first.owner,
             "due_at": time.time()}
    assert rows_read(explain(postgres_url, "retry", retry, generic=generic)) == 1
    cancel = {"queue": unique, "item_id": "due-7"}
    assert rows_read(explain(postgres_url, "cancel", cancel, generic=generic)) == 1
