"""The PostgreSQL store prepares no statement on any connection, whatever the
URL declares, and its operations raise no server notice (so write nothing to
the server's log).

Prepared statements behind a transaction pooler are worse than an error: in
pipeline mode psycopg records a statement's name before the server answers its
Parse, so after one "prepared statement _pg3_0 already exists" the client runs
whatever the shared server connection holds under that name. A URL that leaves
out ``pool_mode=transaction`` must not make that possible.

The statement bound used to be ``SET LOCAL`` in a pipeline's implicit
transaction: one "WARNING: SET LOCAL can only be used in transaction blocks"
per operation, in the client's notices and the server's log."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import psycopg_pool
import pytest

import onceonly
from onceonly.postgres import PostgresStore
from tests.support.servers.pgbouncer import PgBouncer, PgBouncerError
from tests.support.servers.scratch import scratch_database

ROUNDS = 12  # past psycopg's prepare_threshold (5): a preparing client has prepared by then
LOG_ENV = "ONCEONLY_TEST_POSTGRES_LOG"


def every_operation(store: onceonly.Store, rounds: int = ROUNDS) -> None:
    """Each store operation, ``rounds`` times."""
    store.setup()
    run = secrets.token_hex(4)
    queue = store.queue(f"q-{run}")
    for i in range(rounds):
        lease = store.acquire(f"l-{run}-{i}", ttl=30)
        assert lease is not None
        lease = store.renew(lease, ttl=30)
        assert store.inspect(lease.name) is not None
        assert store.complete(lease, keep=60, expire=True) if i % 2 else store.release(lease)
        queue.put(f"a-{i}")
        queue.put_many([(f"b-{i}", None, {"i": i}), (f"c-{i}", None, None)])
        claims = queue.claim(limit=3, lease=30)
        assert len(claims) == 3
        assert queue.retry(claims[0], time.time() + 3600)
        assert queue.ack_many(claims[1:]) == [True, True]
        assert queue.cancel(f"a-{i}") in (True, False)
        queue.depth()
        store.prune_expired(limit=10)


def prepared_on(conn: psycopg.Connection[Any]) -> list[str]:
    rows = conn.execute("SELECT name || ': ' || statement FROM pg_prepared_statements", prepare=False).fetchall()
    return [str(row[0]) for row in rows]


@pytest.fixture
def one_server_connection(postgres_server_url: str, postgres_url: str) -> Iterator[tuple[PgBouncer, str]]:
    """A transaction-mode PgBouncer with ONE server connection for the run's
    database: every client's transactions share it, as on a busy pooler."""
    try:
        bouncer = PgBouncer(postgres_server_url, "transaction", default_pool_size="1").__enter__()
    except PgBouncerError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield bouncer, bouncer.url(postgres_url)
    finally:
        bouncer.__exit__()


def test_the_store_prepares_nothing_behind_an_undeclared_transaction_pooler(
        one_server_connection: tuple[PgBouncer, str]) -> None:
    """The URL does not say ``pool_mode=transaction``: the store still leaves no
    prepared statement on the pooler's (only) server connection."""
    _, url = one_server_connection
    assert "pool_mode" not in url
    store = onceonly.connect(f"{url}?timeout=10")
    try:
        every_operation(store)
    finally:
        store.close()
    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as other_client:
        assert prepared_on(other_client) == []


def test_the_store_prepares_nothing_on_a_pool_you_built(postgres_url: str) -> None:
    """Your own pool keeps psycopg's default prepare_threshold; the store's
    statements are never prepared on it either."""
    pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
        postgres_url, kwargs={"autocommit": True}, min_size=1, max_size=1, open=True)
    try:
        every_operation(PostgresStore(pool))
        with pool.connection() as conn:
            assert conn.prepare_threshold == 5  # your setting, left alone
            assert prepared_on(conn) == []
    finally:
        pool.close()


def server_log(conn: psycopg.Connection[Any]) -> Path:
    """The server's log file: ``$ONCEONLY_TEST_POSTGRES_LOG``, the logging
    collector's current file, or Debian's /var/log/postgresql/postgresql-V-C.log."""
    candidates = [os.environ.get(LOG_ENV, "")]
    current, data_dir, cluster, version = conn.execute(
        "SELECT pg_current_logfile(), current_setting('data_directory'), current_setting('cluster_name'),"
        " current_setting('server_version_num')::int / 10000").fetchone() or (None, "", "", 0)
    if current:
        candidates.append(str(Path(data_dir) / current))
    candidates.append(f"/var/log/postgresql/postgresql-{(cluster or f'{version}/main').replace('/', '-')}.log")
    for candidate in candidates:
        if candidate and os.access(candidate, os.R_OK):
            return Path(candidate)
    pytest.fail(f"cannot find the PostgreSQL server's log to read (tried {', '.join(c for c in candidates if c)});"
                f" set {LOG_ENV} to its path", pytrace=False)


def test_store_operations_raise_no_notice_and_log_nothing(postgres_server_url: str) -> None:
    with scratch_database(postgres_server_url, "onceonly_quiet") as url, \
            psycopg.connect(url, autocommit=True) as admin:
        database = admin.info.dbname
        log = server_log(admin)
        logged_before = log.stat().st_size
        store = PostgresStore.from_url(f"{url}?timeout=10", max_size=1)
        notices: list[str] = []
        try:
            with store._pool.connection() as conn:  # the pool's one connection, reused by every operation
                conn.add_notice_handler(lambda diag: notices.append(f"{diag.severity}: {diag.message_primary}"))
                listened = conn
            every_operation(store, rounds=3)
            with store._pool.connection() as conn:
                assert conn is listened, "the pool replaced its connection: notices went unheard"
        finally:
            store.close()
        # A control: the same warning from this database, outside the store,
        # must be found in the log (the search below can fail).
        admin.execute("SET LOCAL statement_timeout = 1000")
        with log.open("rb") as f:
            f.seek(logged_before)
            logged = [line for line in f.read().decode(errors="replace").splitlines() if f"@{database} " in line]
    assert notices == []
    warnings = [line for line in logged if "WARNING" in line or "NOTICE" in line]
    assert len(warnings) == 1 and "SET LOCAL can only be used in transaction blocks" in warnings[0], logged
