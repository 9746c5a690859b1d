"""Events are ordered by their sequence, taken in the transaction of the change
under the invoice's row lock, never by the time a transaction began: a late
payment whose watcher transaction began before the hourly overdue run commits
after it, so its invoice.paid must follow the invoice.overdue, both when the
outbox is sent and when a disabled subscription's held events are released."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import onceonly
from onceonly_app.events import outbox
from onceonly_app.webhooks import subscriptions
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_cli.testing.receiver import WebhookReceiver
from tests.support.delivery.webhooks import context, lambda_env, message, new_id, sqs_event, subscribe
from tests.support.jobs import jobs_data as data
from tests.support.jobs.jobs_helpers import aws_client, drain_queue

LATER_CHANGE_EARLIER_START = timedelta(minutes=5)  # the watcher's transaction began before the overdue run


def test_the_outbox_is_sent_in_sequence_order_not_transaction_start_order(
        pool: ConnectionPool, jobs_db: str, moto_endpoint: str, sqs_queue: str, unique: str) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        webhook = data.add_subscription(conn, tenant)
    with pool.connection() as conn, conn.transaction():
        outbox.fan_out(conn, f"evt_overdue_{unique}", "invoice.overdue", tenant, {"tenant_id": tenant})
    with pool.connection() as conn, conn.transaction():
        outbox.fan_out(conn, f"evt_paid_{unique}", "invoice.paid", tenant, {"tenant_id": tenant})
        # its transaction began before the overdue run's (now() is the transaction's start)
        conn.execute("UPDATE webhook_outbox SET created_at = created_at - %s WHERE event_id = %s",
                     (LATER_CHANGE_EARLIER_START, f"evt_paid_{unique}"))

    assert outbox.flush(pool, aws_client("sqs", moto_endpoint), sqs_queue, tenant=tenant).sent == 2

    sent = [m for m in drain_queue(moto_endpoint, sqs_queue) if m["webhook_id"] == webhook]
    assert [m["event_type"] for m in sent] == ["invoice.overdue", "invoice.paid"]
    assert sent[0]["sequence"] < sent[1]["sequence"] and sent[0]["occurred_at"] > sent[1]["occurred_at"]


@pytest.fixture
def conn(webhook_db: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(webhook_db, autocommit=True) as connection:
        yield connection


def test_held_events_are_released_in_sequence_order(
        env: dict[str, str], webhook_db: str, store: onceonly.Store, queue_name: str, receiver: WebhookReceiver,
        conn: psycopg.Connection) -> None:
    webhook_id = subscribe(webhook_db, receiver)
    subscriptions.disable(conn, webhook_id, "the endpoint is being moved")
    overdue_at = datetime.now(UTC)
    events = [("invoice.overdue", new_id("evt"), 7, overdue_at),
              ("invoice.paid", new_id("evt"), 8, overdue_at - LATER_CHANGE_EARLIER_START)]
    with lambda_env(env) as (dispatch, _):
        for event_type, event_id, sequence, occurred_at in events:
            body = {**json.loads(message(webhook_id, event_id, event_type)), "sequence": sequence,
                    "occurred_at": occurred_at.isoformat()}
            assert dispatch(sqs_event([json.dumps(body)]), context("dispatch")) == {"batchItemFailures": []}

    released = subscriptions.enable(conn, store.queue(queue_name), webhook_id)

    assert released.released == [delivery_id_for(webhook_id, event_id) for _, event_id, _, _ in events]
