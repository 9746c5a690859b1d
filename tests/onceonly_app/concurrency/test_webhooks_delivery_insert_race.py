"""The racing INSERT of a delivery (deliveries.sql, create_delivery). A
delivery's id is derived from (webhook_id, event_id), so its table has two
unique indexes for one fact: the primary key and webhook_deliveries_once. Of
several invocations inserting the same delivery at once, one creates it and
every other one is told "duplicate", whichever index its insert meets first;
none raises. Several OS processes insert the same deliveries after one start
line; each records what its insert came to."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from onceonly_app.webhooks import deliveries as records
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.messages import DeliveryRequest
from tests.support.delivery.webhooks import create_subscription, deliveries, new_id
from tests.support.races.race import run_workers

pytestmark = pytest.mark.concurrency
WORKERS = 4
EVENTS = 400


def _inserter(worker_no: int, barrier: Any, history_path: Path, db: str, webhook_id: str,
              events: list[str]) -> None:
    from psycopg_pool import ConnectionPool

    from tests.support.races.race import BARRIER_TIMEOUT, History

    history = History(history_path)
    with ConnectionPool(db, min_size=1, max_size=1, open=True) as pool:
        with pool.connection() as conn:
            conn.execute("SELECT 1")  # connected before the start line
        barrier.wait(BARRIER_TIMEOUT)
        # Half the workers walk the events backwards: the inserts meet in the middle too.
        for event_id in events if worker_no % 2 == 0 else reversed(events):
            request = DeliveryRequest(webhook_id, event_id, "invoice.paid", {"n": event_id}, "tenant-webhooks")
            try:
                with records.connection(pool) as conn:
                    created = records.create(conn, request) is not None
                history.write(worker=worker_no, event=event_id, kind="created" if created else "duplicate")
            except Exception as exc:  # noqa: BLE001 - the verdict names what a racing insert raised
                history.write(worker=worker_no, event=event_id, kind=f"raised {exc.__class__.__name__}: {exc}")
    history.close()


def test_racing_inserts_of_one_delivery_create_it_once_and_never_raise(webhook_db: str, tmp_path: Path) -> None:
    webhook_id = create_subscription(webhook_db, "http://127.0.0.1:9/", "whsec_unused")
    events = [new_id("evt") for _ in range(EVENTS)]
    history = run_workers(_inserter, WORKERS, tmp_path / "insert", webhook_db, webhook_id, events,
                          won=lambda e: e["kind"] == "created")
    raised = [e["kind"] for e in history if e["kind"].startswith("raised")]
    assert raised == []
    assert Counter(e["event"] for e in history if e["kind"] == "created") == dict.fromkeys(events, 1)
    assert len(history) == WORKERS * EVENTS
    assert len(deliveries(webhook_db, [delivery_id_for(webhook_id, e) for e in events])) == EVENTS


def test_an_insert_meeting_the_primary_key_first_is_a_duplicate_not_an_error(webhook_db: str) -> None:
    """The other index, met alone: a row already holds the derived id (as a
    racing insert's does between its two index entries), and the insert's
    arbiter must still be every unique index, not only (webhook_id, event_id)."""
    from psycopg_pool import ConnectionPool

    webhook_id = create_subscription(webhook_db, "http://127.0.0.1:9/", "whsec_unused")
    event_id, other = new_id("evt"), new_id("evt")
    with psycopg.connect(webhook_db, autocommit=True) as conn:
        # The derived id of (webhook_id, event_id), held by a row of another event.
        conn.execute("INSERT INTO webhook_deliveries (id, webhook_id, tenant_id, event_id, event_type, payload) "
                     "VALUES (%s, %s, 'tenant-webhooks', %s, 'invoice.paid', '{}')",
                     (delivery_id_for(webhook_id, event_id), webhook_id, other))
    with ConnectionPool(webhook_db, min_size=1, max_size=1, open=True) as pool:
        request = DeliveryRequest(webhook_id, event_id, "invoice.paid", {}, "tenant-webhooks")
        with records.connection(pool) as conn:
            assert records.create(conn, request) is None
