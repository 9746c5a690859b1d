"""Order under per-endpoint limits (docs/webhooks.md, "Ordering"): under
WEBHOOK_SERIAL_PER_SUBSCRIPTION, once the endpoint's rate holds a record of an
SQS batch back, the rest of its subscription's records are held back behind
it, so none overtakes it; a retry worker sending one at a time
(WEBHOOK_MAX_IN_FLIGHT=1) then delivers them in event order. The real
handlers, a local receiver recording the order requests arrived in, on the
stores whose queue hands out the earliest due item first (PostgreSQL, Redis)."""

from __future__ import annotations

import json

import psycopg
import pytest

import onceonly
from onceonly_app.webhooks import subscriptions
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.endpoint_limits import semaphore_name
from onceonly_cli.testing.receiver import WebhookReceiver
from tests.support.delivery.held_deliveries import LOCAL, held_subscription, new_tenant
from tests.support.delivery.webhooks import (
    context,
    deliveries,
    drive_retries,
    lambda_env,
    new_id,
    sqs_event,
    webhook_env,
)

ORDERED_BACKENDS = ["postgres", "redis"]  # DynamoDB's sharded queue hands out due items in no order
EVENTS = 8
RATE = 2.0  # a burst of 2, then one every half second: most of the batch is held back


@pytest.fixture(params=ORDERED_BACKENDS)
def store_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_url"))


def test_a_lane_held_back_by_the_rate_keeps_its_order(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver
) -> None:
    env = webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=new_id("webhook-retries"),
                      WEBHOOK_SERIAL_PER_SUBSCRIPTION="1", WEBHOOK_MAX_IN_FLIGHT="1", WEBHOOK_CLAIM_BATCH="2")
    with psycopg.connect(webhook_db, autocommit=True) as conn:
        tenant = new_tenant(conn)
        added = subscriptions.add(conn, tenant, "http://127.0.0.1:9/", max_in_flight=1000, rate_per_second=RATE,
                                  allow_http_hosts=LOCAL)
        subscriptions.update(conn, added.id, url=receiver.endpoint(new_id("ep"), added.secret),
                             allow_http_hosts=LOCAL)
    events = [new_id("evt") for _ in range(EVENTS)]
    bodies = [json.dumps({"webhook_id": added.id, "tenant_id": tenant, "event_id": e, "event_type": "invoice.paid",
                          "payload": {"n": n}, "sequence": n}) for n, e in enumerate(events, start=1)]
    expected = [delivery_id_for(added.id, e) for e in events]
    with lambda_env(env) as (dispatch, retry):
        assert dispatch(sqs_event(bodies), context("dispatch")) == {"batchItemFailures": []}
        rows = deliveries(webhook_db, expected)
        held = [d for d in expected if rows[d]["status"] == "retrying"]
        assert held == expected[int(RATE):]  # the burst went; from the first held back on, all wait
        due = [rows[d]["next_attempt_at"] for d in held]
        assert due == sorted(due) and len(set(due)) == len(due)  # behind one another, in batch order
        drive_retries(retry, lambda: len(receiver.successes()) == EVENTS, timeout=30)
    arrived = [r.webhook_id for r in receiver.history() if r.accepted]
    assert arrived == expected  # in event order, none overtaken
    assert {(r["status"], r["attempts"]) for r in deliveries(webhook_db, expected).values()} == {("succeeded", 1)}


def test_a_lane_held_back_by_the_in_flight_cap_keeps_its_order(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver
) -> None:
    env = webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=new_id("webhook-retries"),
                      WEBHOOK_SERIAL_PER_SUBSCRIPTION="1", WEBHOOK_MAX_IN_FLIGHT="1", WEBHOOK_CLAIM_BATCH="2")
    with psycopg.connect(webhook_db, autocommit=True) as conn:
        tenant = new_tenant(conn)
        added = subscriptions.add(conn, tenant, "http://127.0.0.1:9/", max_in_flight=1, allow_http_hosts=LOCAL)
        subscriptions.update(conn, added.id, url=receiver.endpoint(new_id("ep"), added.secret),
                             allow_http_hosts=LOCAL)
    events = [new_id("evt") for _ in range(EVENTS)]
    bodies = [json.dumps({"webhook_id": added.id, "tenant_id": tenant, "event_id": e, "event_type": "invoice.paid",
                          "payload": {"n": n}, "sequence": n}) for n, e in enumerate(events, start=1)]
    expected = [delivery_id_for(added.id, e) for e in events]
    busy = store.take_permit(semaphore_name(added.id), 1, ttl=30)  # another replica's request to it is in flight
    assert busy is not None
    with lambda_env(env) as (dispatch, retry):
        assert dispatch(sqs_event(bodies), context("dispatch")) == {"batchItemFailures": []}
        rows = deliveries(webhook_db, expected)
        assert all(rows[d]["status"] == "retrying" for d in expected)  # the first held back, the rest behind it
        due = [rows[d]["next_attempt_at"] for d in expected]
        assert due == sorted(due) and len(set(due)) == len(due), due
        assert store.return_permit(busy)
        drive_retries(retry, lambda: len(receiver.successes()) == EVENTS, timeout=30)
    arrived = [r.webhook_id for r in receiver.history() if r.accepted]
    assert arrived == expected  # in event order, none overtaken
    assert {(r["status"], r["attempts"]) for r in deliveries(webhook_db, expected).values()} == {("succeeded", 1)}


def test_enable_releases_a_backlog_into_a_rate_limited_subscription_in_order(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver
) -> None:
    env = webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=new_id("webhook-retries"), WEBHOOK_MAX_IN_FLIGHT="1",
                      WEBHOOK_CLAIM_BATCH="2")
    with psycopg.connect(webhook_db, autocommit=True) as conn:
        webhook_id, _ = held_subscription(conn, env, receiver, EVENTS, max_in_flight=1000, rate_per_second=RATE)
        released = subscriptions.enable(conn, store.queue(env["WEBHOOK_QUEUE"]), webhook_id).released
    assert len(released) == EVENTS
    with lambda_env(env) as (_, retry):
        drive_retries(retry, lambda: len(receiver.successes()) == EVENTS, timeout=30)
    assert [r.webhook_id for r in receiver.history() if r.accepted] == released  # in event order
    rows = deliveries(webhook_db, released)
    assert sum(r["deferrals"] for r in rows.values()) > 0  # the rate really held some back
