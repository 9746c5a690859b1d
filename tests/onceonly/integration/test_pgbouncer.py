"""PostgreSQL through a real PgBouncer in transaction mode with its default
settings: the connection sends nothing it refuses, a permanent
refusal is reported at once with the server's own message (not a pool
timeout), and the server-side statement bound still holds there."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator

import psycopg
import pytest

import onceonly
from onceonly.postgres import bounded_pool, split_options
from onceonly_cli.local.scratch import create_database, drop_database
from tests.support.servers.pgbouncer import PgBouncer
from tests.support.stores.refusals import set_up_once_seen

TIMEOUT = 2.0  # the store's bound; its pool would wait TIMEOUT/2 for a connection
FAST = TIMEOUT / 10  # a refusal must arrive well before that wait ends (the server answers in ms)


@pytest.fixture
def bouncer_store(postgres_pgbouncer_url: str) -> Iterator[onceonly.Store]:
    store = onceonly.connect(f"{postgres_pgbouncer_url}&timeout={TIMEOUT:g}")
    store.setup()
    yield store
    store.close()


def refused_at_once(url: str, needle: str) -> str:
    store = onceonly.connect(url)
    try:
        return refuses_at_once(store, needle)
    finally:
        store.close()


def refuses_at_once(store: onceonly.Store, needle: str) -> str:
    started = time.monotonic()
    with pytest.raises(onceonly.StoreRefusedError, match=needle) as caught:
        store.acquire("never-granted", ttl=30)
    elapsed = time.monotonic() - started
    assert elapsed < FAST, f"the refusal took {elapsed:.2f} s: it waited for a pool timeout"
    return str(caught.value)


def test_the_store_connects_through_a_default_pgbouncer_without_declaring_it(
        postgres_pgbouncer_url: str, bouncer_store: onceonly.Store, unique: str) -> None:
    """Nothing the connection sends at startup is refused: PgBouncer 1.18 in
    transaction mode rejects startup ``options`` with its default settings."""
    undeclared = postgres_pgbouncer_url.replace("pool_mode=transaction", f"timeout={TIMEOUT:g}")
    store = onceonly.connect(undeclared)
    try:
        lease = store.acquire(unique, ttl=30)
        assert lease is not None and store.release(lease)
    finally:
        store.close()


def test_a_refused_startup_parameter_is_reported_at_once_with_the_servers_message(
        postgres_pgbouncer_url: str) -> None:
    url = f"{postgres_pgbouncer_url}&timeout={TIMEOUT:g}&options=-c%20statement_timeout%3D1000"
    message = refused_at_once(url, "unsupported startup parameter: options")
    assert "couldn't get a connection" not in message


@pytest.mark.parametrize("through_pgbouncer", [True, False], ids=["pgbouncer", "direct"])
def test_an_unknown_database_is_reported_at_once_with_the_servers_message(
        postgres_server_url: str, pgbouncer: PgBouncer, through_pgbouncer: bool) -> None:
    url = postgres_server_url.rsplit("/", 1)[0] + "/onceonly_no_such_database"
    url = pgbouncer.url(url, timeout=f"{TIMEOUT:g}") if through_pgbouncer else f"{url}?timeout={TIMEOUT:g}"
    refused_at_once(url, 'database "onceonly_no_such_database" does not exist')


def test_a_warm_store_keeps_reporting_a_refusal_at_once_and_sees_the_fix(postgres_server_url: str) -> None:
    """A warm container's next calls fail fast too, also while the pool's own
    retry of the refused connect is pending; once the database exists, a call
    within the pool's retry window (TIMEOUT/2) works."""
    name = f"onceonly_late_{secrets.token_hex(4)}"
    store = onceonly.connect(f"{postgres_server_url.rsplit('/', 1)[0]}/{name}?timeout={TIMEOUT:g}")
    try:
        for _ in range(4):
            refuses_at_once(store, f'database "{name}" does not exist')
            time.sleep(TIMEOUT / 4)  # spans the pool's first retries of the connect
        create_database(postgres_server_url, name)
        set_up_once_seen(store, within=TIMEOUT)
        assert store.acquire("seen", ttl=30) is not None
    finally:
        store.close()
        drop_database(postgres_server_url, name)


def test_an_unknown_role_is_reported_at_once(postgres_url: str) -> None:
    url = postgres_url.replace("//postgres@", "//onceonly_no_such_role@", 1)
    assert url != postgres_url
    refused_at_once(f"{url}?timeout={TIMEOUT:g}", 'role "onceonly_no_such_role" does not exist')


def test_the_server_stops_a_statement_that_outlives_the_bound(postgres_url: str, unique: str) -> None:
    """An ack waits for a row another session holds. The caller fails within
    the bound (the client side), and the server cancels the statement too (SET
    LOCAL statement_timeout, no startup parameter): no backend is left waiting
    for the lock, to ack once it is free. On a direct connection: PgBouncer
    itself cancels the query of a client that went away, so through it this
    would pass without the server's bound."""
    url = postgres_url
    store = onceonly.connect(f"{url}{'&' if '?' in url else '?'}timeout={TIMEOUT:g}")
    store.setup()
    try:
        q = store.queue(unique)
        q.put("held")
        (claim,) = q.claim(limit=1, lease=60)
        direct = split_options(url)[0]
        with psycopg.connect(direct) as holder:
            holder.execute("SELECT 1 FROM onceonly_queue WHERE queue = %s FOR UPDATE", (unique,))
            with pytest.raises(onceonly.StoreUnavailableError):
                q.ack(claim)
            assert waiting_backends(direct) == 0, "the server still runs the timed-out ack"
        assert q.depth().in_flight == 1  # the ack never ran
    finally:
        store.close()


def waiting_backends(url: str) -> int:
    """Backends of ``url``'s database (this run's own) still waiting for a
    lock, once the server's own bound (TIMEOUT/2) has had time to end them."""
    deadline = time.monotonic() + TIMEOUT
    with psycopg.connect(url, autocommit=True) as admin:
        while True:
            row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE state = 'active'"
                                " AND wait_event_type = 'Lock' AND datname = current_database()").fetchone()
            count = int(row[0]) if row else 0
            if count == 0 or time.monotonic() > deadline:
                return count
            time.sleep(0.05)


@pytest.mark.parametrize("through_pgbouncer", [False, True], ids=["direct", "pgbouncer"])
def test_the_domain_pool_bounds_its_session_only_where_sessions_are_its_own(
        postgres_url: str, pgbouncer: PgBouncer, through_pgbouncer: bool) -> None:
    """Direct, the domain database's connections carry the statement bound for
    their whole session (set once, no startup parameter). Behind a transaction
    pooler they set nothing that would outlive a transaction, and stay bounded
    on the client."""
    url = pgbouncer.url(postgres_url, pool_mode="transaction") if through_pgbouncer else postgres_url
    pool = bounded_pool(url, name="db-test", max_size=1, autocommit=False, session_bound=True)
    try:
        with pool.connection() as conn:
            row = conn.execute("SHOW statement_timeout").fetchone()
    finally:
        pool.close()
    assert row == (("0" if through_pgbouncer else "5s"),)
