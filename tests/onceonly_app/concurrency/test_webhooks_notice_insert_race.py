"""The racing INSERT of an operational notice (endpoint_health.sql:
announce_exhausted and auto_disable). A notice is a delivery: its id is
derived from (webhook_id, event_id), so its insert can meet either of the
table's two unique indexes first. Of several workers announcing the same dead
deliveries at once, none raises and each notice exists once. Several OS
processes announce after one start line; each records what its call came to."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

import onceonly
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.endpoint_health import ENDPOINT_DISABLED, MESSAGE_EXHAUSTED, EndpointHealth
from tests.support.delivery.webhooks import create_subscription, deliveries, new_id
from tests.support.races.race import run_workers

pytestmark = pytest.mark.concurrency
WORKERS = 4
DEAD = 150
DAY = 24 * 3600.0


def _subscription(db: str, tenant: str) -> str:
    return create_subscription(db, "http://127.0.0.1:9/", "whsec_unused", tenant_id=tenant)


def _operational(db: str, tenant: str, event_type: str) -> str:
    webhook_id = _subscription(db, tenant)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("UPDATE webhook_subscriptions SET event_types = %s WHERE id = %s", ([event_type], webhook_id))
    return webhook_id


def _dead_deliveries(db: str, tenant: str, webhook_id: str, count: int) -> list[str]:
    ids = []
    with psycopg.connect(db, autocommit=True) as conn:
        for _ in range(count):
            event_id = new_id("evt")
            ids.append(delivery_id_for(webhook_id, event_id))
            conn.execute("INSERT INTO webhook_deliveries (id, webhook_id, tenant_id, event_id, event_type, payload,"
                         " status) VALUES (%s, %s, %s, %s, 'invoice.paid', '{}', 'dead')",
                         (ids[-1], webhook_id, tenant, event_id))
    return ids


def _health(pool: Any, store_url: str, queue: str) -> EndpointHealth:
    import time

    return EndpointHealth(pool, onceonly.connect(store_url).queue(queue), period=DAY, lease=30.0,
                          clock=time.time, log=logging.getLogger("test"))


def _announcer(worker_no: int, barrier: Any, history_path: Path, db: str, queue: str, tenant: str, webhook_id: str,
               dead: list[str]) -> None:
    from psycopg_pool import ConnectionPool

    from tests.support.races.race import BARRIER_TIMEOUT, History

    history = History(history_path)
    with ConnectionPool(db, min_size=1, max_size=1, open=True) as pool:
        with pool.connection() as conn:
            conn.execute("SELECT 1")  # connected before the start line
        health = _health(pool, db, queue)
        barrier.wait(BARRIER_TIMEOUT)
        # Half the workers walk the deliveries backwards: the inserts meet in the middle too.
        for delivery_id in dead if worker_no % 2 == 0 else reversed(dead):
            try:
                health.exhausted(delivery_id, 0, tenant, webhook_id, "evt", "invoice.paid", 500, "failed")
                history.write(worker=worker_no, delivery=delivery_id, kind="announced")
            except Exception as exc:  # noqa: BLE001 - the verdict names what a racing insert raised
                history.write(worker=worker_no, delivery=delivery_id, kind=f"raised {exc.__class__.__name__}: {exc}")
    history.close()


def test_racing_announcements_of_one_dead_delivery_write_each_notice_once_and_never_raise(
        webhook_db: str, pg_store: onceonly.Store, tmp_path: Path) -> None:
    tenant = new_id("tenant")
    failing = _subscription(webhook_db, tenant)
    ops = _operational(webhook_db, tenant, MESSAGE_EXHAUSTED)
    dead = _dead_deliveries(webhook_db, tenant, failing, DEAD)
    history = run_workers(_announcer, WORKERS, tmp_path / "announce", webhook_db, new_id("q"), tenant, failing, dead,
                          won=lambda e: e["kind"] == "announced")
    assert [e["kind"] for e in history if e["kind"].startswith("raised")] == []
    assert Counter(e["delivery"] for e in history) == dict.fromkeys(dead, WORKERS)
    notices = [delivery_id_for(ops, f"{MESSAGE_EXHAUSTED}:{d}:0") for d in dead]
    assert len(deliveries(webhook_db, notices)) == DEAD


def _holding_the_derived_id(db: str, tenant: str, webhook_id: str, delivery_id: str) -> None:
    """A row of another event holding ``delivery_id``: what a racing insert's row
    is between its two index entries. An insert whose arbiter is only
    (webhook_id, event_id) meets the primary key and raises."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("INSERT INTO webhook_deliveries (id, webhook_id, tenant_id, event_id, event_type, payload) "
                     "VALUES (%s, %s, %s, %s, 'invoice.paid', '{}')", (delivery_id, webhook_id, tenant, new_id("evt")))


def test_an_exhausted_notice_meeting_the_primary_key_first_is_a_duplicate_not_an_error(
        webhook_db: str, pg_store: onceonly.Store) -> None:
    from psycopg_pool import ConnectionPool

    tenant = new_id("tenant")
    failing = _subscription(webhook_db, tenant)
    ops = _operational(webhook_db, tenant, MESSAGE_EXHAUSTED)
    [dead] = _dead_deliveries(webhook_db, tenant, failing, 1)
    notice = delivery_id_for(ops, f"{MESSAGE_EXHAUSTED}:{dead}:0")
    _holding_the_derived_id(webhook_db, tenant, ops, notice)
    with ConnectionPool(webhook_db, min_size=1, max_size=1, open=True) as pool:
        assert _health(pool, webhook_db, new_id("q")).exhausted(
            dead, 0, tenant, failing, "evt", "invoice.paid", 500, "failed") == [notice]


def test_a_disabled_notice_meeting_the_primary_key_first_is_a_duplicate_not_an_error(
        webhook_db: str, pg_store: onceonly.Store) -> None:
    import time

    from psycopg_pool import ConnectionPool

    tenant = new_id("tenant")
    failing = _subscription(webhook_db, tenant)
    ops = _operational(webhook_db, tenant, ENDPOINT_DISABLED)
    failing_since = time.time() - 2 * DAY
    with psycopg.connect(webhook_db, autocommit=True) as conn:
        conn.execute("UPDATE webhook_subscriptions SET failing_since = to_timestamp(%s) WHERE id = %s",
                     (failing_since, failing))
        since = conn.execute("SELECT extract(epoch FROM failing_since)::float8 FROM webhook_subscriptions "
                             "WHERE id = %s", (failing,)).fetchone()[0]
    notice = delivery_id_for(ops, f"{ENDPOINT_DISABLED}:{failing}:{since:.6f}")
    _holding_the_derived_id(webhook_db, tenant, ops, notice)
    with ConnectionPool(webhook_db, min_size=1, max_size=1, open=True) as pool:
        disabled = _health(pool, webhook_db, new_id("q")).failed(failing, since)
    assert disabled is not None and disabled.notices == [notice]
    with psycopg.connect(webhook_db) as conn:
        assert conn.execute("SELECT enabled FROM webhook_subscriptions WHERE id = %s", (failing,)).fetchone() == \
            (False,)
