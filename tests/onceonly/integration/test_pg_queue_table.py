"""PostgreSQL setup() tunes the queue table for churn, and upgrades a table of
an earlier version: the claim index becomes partial and keyed by the queue
name in the "C" collation, storage options are set once and the user's own
are kept."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

import onceonly
from tests.support.servers.scratch import scratch_database

# The queue table and index as version 0.1 created them.
OLD_QUEUE_TABLE = """
CREATE TABLE onceonly_queue (
    queue text NOT NULL, item_id text NOT NULL, payload jsonb, claimable_at timestamptz NOT NULL,
    token bigint NOT NULL DEFAULT 0, attempt integer NOT NULL DEFAULT 0, owner text,
    PRIMARY KEY (queue, item_id));
CREATE INDEX onceonly_queue_claimable ON onceonly_queue (queue, claimable_at);
"""
# The claim index of the versions since, before it took the "C" collation.
PREVIOUS_CLAIM_INDEX = ("CREATE INDEX onceonly_queue_due ON onceonly_queue (queue, claimable_at)"
                        " WHERE claimable_at IS NOT NULL")


@pytest.fixture
def empty_database(postgres_server_url: str) -> Iterator[str]:
    with scratch_database(postgres_server_url, "onceonly_table") as url:
        yield url


def _table(url: str) -> tuple[list[str] | None, dict[str, str]]:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT reloptions FROM pg_class WHERE relname = 'onceonly_queue'").fetchone()
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'onceonly_queue'").fetchall()
    assert row is not None
    return row[0], dict(indexes)


def _setup(url: str) -> None:
    store = onceonly.connect(url)
    try:
        store.setup()
    finally:
        store.close()


def _assert_claim_index_only(indexes: dict[str, str]) -> None:
    assert set(indexes) == {"onceonly_queue_pkey", "onceonly_queue_ready"}
    assert 'queue COLLATE "C", claimable_at' in indexes["onceonly_queue_ready"]
    assert indexes["onceonly_queue_ready"].endswith("WHERE (claimable_at IS NOT NULL)")


@pytest.mark.parametrize("previous", ["0.1", "plain-collation"])
def test_setup_upgrades_the_old_table_and_tunes_it_once(empty_database: str, previous: str) -> None:
    with psycopg.connect(empty_database, autocommit=True) as conn:
        conn.execute(OLD_QUEUE_TABLE)
        if previous == "plain-collation":
            conn.execute("DROP INDEX onceonly_queue_claimable")
            conn.execute(PREVIOUS_CLAIM_INDEX)
        conn.execute("INSERT INTO onceonly_queue (queue, item_id, claimable_at) VALUES ('q', 'kept', now())")
    _setup(empty_database)
    options, indexes = _table(empty_database)
    assert sorted(options or []) == ["autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_threshold=1000",
                                     "fillfactor=80"]
    _assert_claim_index_only(indexes)
    _setup(empty_database)  # a second setup() finds the index and builds nothing
    assert _table(empty_database)[1] == indexes

    store = onceonly.connect(empty_database)
    try:
        assert [c.item_id for c in store.queue("q").claim(limit=5, lease=30)] == ["kept"]
    finally:
        store.close()


def test_setup_keeps_storage_options_set_by_the_user(empty_database: str) -> None:
    _setup(empty_database)
    with psycopg.connect(empty_database, autocommit=True) as conn:
        conn.execute("ALTER TABLE onceonly_queue RESET (fillfactor, autovacuum_vacuum_threshold)")
        conn.execute("ALTER TABLE onceonly_queue SET (autovacuum_vacuum_scale_factor = 0.05)")
    _setup(empty_database)
    assert _table(empty_database)[0] == ["autovacuum_vacuum_scale_factor=0.05"]


def test_setup_converts_an_old_jsonb_payload_column_and_keeps_its_rows(empty_database: str) -> None:
    """Tables of 0.2 and earlier hold payloads in jsonb, which changes numbers
    (-0.0 comes back 0.0); setup() turns the column into json, once, with the
    rows it holds, and from then on a payload comes back as put."""
    with psycopg.connect(empty_database, autocommit=True) as conn:
        conn.execute(OLD_QUEUE_TABLE)
        conn.execute("INSERT INTO onceonly_queue (queue, item_id, payload, claimable_at)"
                     " VALUES ('q', 'old', '{\"n\": 1}', now())")
    _setup(empty_database)
    _setup(empty_database)  # a second setup() finds json and leaves it
    with psycopg.connect(empty_database) as conn:
        row = conn.execute("SELECT data_type FROM information_schema.columns WHERE table_name = 'onceonly_queue'"
                           " AND column_name = 'payload'").fetchone()
    assert row == ("json",)
    store = onceonly.connect(empty_database)
    try:
        q = store.queue("q")
        q.put("new", due_at=0.0, payload={"z": -0.0})
        claims = {c.item_id: c.payload for c in q.claim(limit=5, lease=30)}
        assert claims["old"] == {"n": 1}
        assert repr(claims["new"]["z"]) == "-0.0"
    finally:
        store.close()
