"""A store that stops answering fails fast. Each store is
reached through a FaultProxy that black-holes the link (accepts bytes, answers
nothing, closes nothing: what a dead peer behind a NAT or a failed-over
endpoint looks like). Every operation must raise StoreUnavailableError within
the URL's ``timeout`` (asserted generously: within twice that), and the store
must work again once the link does."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import onceonly
from onceonly.postgres import bounded_pool
from tests.support.jobs.jobs_workers import REPO
from tests.support.servers.faultproxy import FaultProxy
from tests.support.servers.proxied import target_port, through

TIMEOUT = 1.0  # the store's bound, scaled down from the default 10 s
LAMBDA_TIMEOUT = 3 * TIMEOUT  # a scaled Lambda timeout the handler must beat
EVENT = json.loads((REPO / "events" / "overdue_invoices.json").read_text(encoding="utf-8"))


def event_at(when: str) -> dict[str, Any]:
    return {**copy.deepcopy(EVENT), "time": when}


@pytest.fixture
def proxy(store_url: str) -> Iterator[FaultProxy]:
    with FaultProxy(target_port(store_url)) as p:
        yield p


@pytest.fixture
def proxied_store(store_url: str, proxy: FaultProxy, store: onceonly.Store) -> Iterator[onceonly.Store]:
    """A store through the proxy (the ``store`` fixture has created the tables)."""
    s = onceonly.connect(through(store_url, proxy.port, TIMEOUT))
    yield s
    proxy.passthrough()
    s.close()


def fails_fast(call: Callable[[], Any], bound: float = 2 * TIMEOUT) -> float:
    """Run ``call``; it must raise StoreUnavailableError within ``bound`` s. Returns the seconds taken."""
    started = time.monotonic()
    with pytest.raises(onceonly.StoreUnavailableError):
        call()
    elapsed = time.monotonic() - started
    assert elapsed < bound, f"took {elapsed:.1f} s, bound {bound:g} s"
    return elapsed


def recovers(call: Callable[[], Any], within: float = 4 * TIMEOUT) -> Any:
    """``call``'s result once the store answers again: it may fail while the pool
    gives up connects begun during the outage, but not for longer than ``within``."""
    deadline = time.monotonic() + within
    while True:
        try:
            return call()
        except onceonly.StoreUnavailableError:
            if time.monotonic() > deadline:
                raise


def test_black_holed_store_fails_each_operation_fast_and_recovers(
    proxied_store: onceonly.Store, proxy: FaultProxy, unique: str
) -> None:
    lease = proxied_store.acquire(unique, ttl=60)
    assert lease is not None
    queue = proxied_store.queue(unique)
    queue.put("item-1", due_at=time.time() - 1, payload={"n": 1})

    proxy.blackhole()
    fails_fast(lambda: proxied_store.renew(lease, ttl=60))
    fails_fast(lambda: queue.claim(limit=5, lease=60))
    fails_fast(lambda: proxied_store.acquire(f"{unique}-other", ttl=60))

    proxy.passthrough()
    assert recovers(lambda: proxied_store.renew(lease, ttl=60)).token == lease.token
    (claim,) = queue.claim(limit=5, lease=60)
    assert claim.item_id == "item-1" and queue.ack(claim)
    other = proxied_store.acquire(f"{unique}-other", ttl=60)
    assert other is not None  # the black-holed acquire granted nothing (it would hold the name 60 s)


def test_black_holed_store_fails_permits_fast_and_took_nothing(
    proxied_store: onceonly.Store, proxy: FaultProxy, unique: str
) -> None:
    held = proxied_store.take_permit(unique, 2, ttl=60)
    assert held is not None

    proxy.blackhole()
    fails_fast(lambda: proxied_store.take_permit(unique, 2, ttl=60))
    fails_fast(lambda: proxied_store.return_permit(held))

    proxy.passthrough()
    # the black-holed take took nothing (it would hold a place for 60 s): one place is left
    assert recovers(lambda: proxied_store.take_permit(unique, 2, ttl=60)) is not None
    assert proxied_store.take_permit(unique, 2, ttl=60) is None
    assert proxied_store.return_permit(held) is True


@pytest.mark.parametrize("fault", ["drop", "lose_replies"])
def test_dropped_or_unanswered_link_fails_fast_and_recovers(
    proxied_store: onceonly.Store, proxy: FaultProxy, unique: str, fault: str
) -> None:
    lease = proxied_store.acquire(unique, ttl=60)
    assert lease is not None
    getattr(proxy, fault)()
    fails_fast(lambda: proxied_store.renew(lease, ttl=60))
    proxy.passthrough()
    assert recovers(lambda: proxied_store.renew(lease, ttl=60)).token == lease.token


def test_scheduled_handler_on_a_dead_store_fails_before_the_lambda_timeout(
    proxied_store: onceonly.Store, proxy: FaultProxy, unique: str
) -> None:
    tokens: list[int] = []
    handler = onceonly.scheduled(proxied_store, job=unique, ttl=30)(lambda e, c, tick: tokens.append(tick.token))
    event = event_at("2026-11-29T02:00:00Z")
    proxied_store.inspect("warm-up")  # a pooled connection exists, as in a warm container

    proxy.blackhole()
    fails_fast(lambda: handler(event, None), bound=LAMBDA_TIMEOUT)
    assert tokens == []  # Lambda retries the failed invocation: the tick is not lost

    proxy.passthrough()
    assert recovers(lambda: handler(event, None))["status"] == "ran"
    assert handler(event, None)["reason"] == "completed"
    # ran once; nothing was granted during the outage (a grant would hold the tick for its ttl)
    state = proxied_store.inspect(f"tick:{unique}:2026-11-29T02:00:00Z")
    assert len(tokens) == 1 and state is not None and state.token == tokens[0]


def test_scheduled_handler_whose_store_dies_mid_body_fails_before_the_lambda_timeout(
    proxied_store: onceonly.Store, proxy: FaultProxy, unique: str
) -> None:
    tokens: list[int] = []

    def body(event: Any, context: Any, tick: onceonly.Tick) -> None:
        tokens.append(tick.token)
        proxy.blackhole()  # the store goes silent while the job works

    handler = onceonly.scheduled(proxied_store, job=unique, ttl=30)(body)
    event = event_at("2026-11-29T03:00:00Z")
    fails_fast(lambda: handler(event, None), bound=LAMBDA_TIMEOUT)
    proxy.passthrough()
    # the tick was not completed (a retry can still run it) and nobody else was granted it
    state = recovers(lambda: proxied_store.inspect(f"tick:{unique}:2026-11-29T03:00:00Z"))
    assert state is not None and not state.completed and state.token == tokens[0]


# -- PostgreSQL specifics -----------------------------------------------------------

@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_postgres_idle_connection_killed_by_the_server_does_not_fail_the_next_call(
    store_url: str, store: onceonly.Store, unique: str
) -> None:
    """The pool checks a connection on checkout, so one the server closed while it
    sat idle (a restart, a failover, idle_session_timeout) is replaced unseen."""
    tagged = onceonly.connect(f"{store_url}?application_name={unique}")
    try:
        assert tagged.acquire(unique, ttl=60) is not None
        with psycopg.connect(store_url, autocommit=True) as admin:
            # With a timeout it returns once the backend has exited, i.e. closed
            # the socket, as a server does before the pool next hands it out.
            killed = admin.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
                " WHERE application_name = %s",
                (unique,),
            ).fetchone()
        assert killed is not None and killed[0] >= 1
        assert tagged.acquire(f"{unique}-next", ttl=60) is not None
    finally:
        tagged.close()


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_postgres_reply_wait_is_bounded_on_the_client(store_url: str) -> None:
    """With no server-side statement_timeout, a statement that never answers
    still fails within the bound: the client stops waiting and closes the
    connection, and the pool hands out a fresh one next time."""
    pool = bounded_pool(f"{store_url}?timeout={TIMEOUT:g}&options=-c%20statement_timeout%3D0",
                        name="bounded-test", max_size=1, autocommit=True)
    try:
        def sleep_long() -> None:
            with pool.connection() as conn:
                conn.execute("SELECT pg_sleep(30)")

        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError, match="no reply"):
            sleep_long()
        assert time.monotonic() - started < 2 * TIMEOUT
        with pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        pool.close()
