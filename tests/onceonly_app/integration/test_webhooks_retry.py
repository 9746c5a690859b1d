"""The retry path with the real handlers in process, on each coordination store:
retries keep the webhook-id, Retry-After is honoured, 410 disables, the last
attempt dead-letters, redrive re-queues, a stranded delivery is recovered."""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import onceonly
from onceonly_app.webhooks import deliveries as records
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.messages import DeliveryRequest
from onceonly_app.webhooks.redrive import list_dead, redrive
from onceonly_app.webhooks.signing import new_secret
from onceonly_cli.testing.receiver import Behaviour, Reply, WebhookReceiver
from tests.support.delivery.webhooks import (
    TENANT,
    attempts,
    context,
    create_subscription,
    deliveries,
    drive_retries,
    lambda_env,
    message,
    new_id,
    sqs_event,
    subscribe,
    subscription,
    webhook_env,
)


@pytest.fixture
def db(webhook_db: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(webhook_db, autocommit=True) as conn:  # each statement its own transaction
        yield conn


def test_tokens_start_at_zero_so_the_dispatcher_owns_token_0(store: onceonly.Store, unique: str) -> None:
    """The dispatcher fences its first attempt with token 0; that is only sound if
    every claim of a queue item, the first included, carries a token >= 1."""
    q = store.queue(unique)
    q.put("d1", due_at=time.time() - 1, payload={"generation": 0})
    (first,) = q.claim(limit=1, lease=30)
    assert first.token >= 1 and first.attempt == 1
    assert q.retry(first, due_at=time.time() - 1)
    q.put("d1", due_at=time.time() - 1, payload={"generation": 0})  # a reschedule keeps counting
    (second,) = q.claim(limit=1, lease=30)
    assert second.token > first.token


def test_a_failed_first_attempt_is_retried_with_the_same_webhook_id(
    env: dict[str, str], webhook_db: str, receiver: WebhookReceiver
) -> None:
    webhook_id = subscribe(webhook_db, receiver, Behaviour(fail_first=1))
    event_id = new_id("evt")
    delivery_id = delivery_id_for(webhook_id, event_id)
    with lambda_env(env) as (dispatch, retry):
        assert dispatch(sqs_event([message(webhook_id, event_id)]), context("dispatch")) == {"batchItemFailures": []}
        assert deliveries(webhook_db, [delivery_id])[delivery_id]["status"] == "retrying"
        drive_retries(retry, lambda: receiver.successes()[delivery_id] == 1)
    history = receiver.history(delivery_id)
    assert [(r.status, r.verified) for r in history] == [(500, True), (200, True)]
    row = deliveries(webhook_db, [delivery_id])[delivery_id]
    assert (row["status"], row["attempts"], row["response_code"]) == ("succeeded", 2, 200)
    log = attempts(webhook_db, [delivery_id])
    assert [(a["outcome"], a["recorded"], a["attempt"]) for a in log] == [("failed", True, 1), ("succeeded", True, 2)]
    assert log[0]["fence_token"] == 0 and log[1]["fence_token"] >= 1


def test_retry_after_is_honoured(env: dict[str, str], webhook_db: str, receiver: WebhookReceiver) -> None:
    webhook_id = subscribe(webhook_db, receiver)
    event_id = new_id("evt")
    delivery_id = delivery_id_for(webhook_id, event_id)
    receiver.script(delivery_id, [Reply(429, retry_after="3")])  # the schedule alone would say 0.2 s
    with lambda_env(env) as (dispatch, retry):
        dispatch(sqs_event([message(webhook_id, event_id)]), context("dispatch"))
        row = deliveries(webhook_db, [delivery_id])[delivery_id]
        (first,) = attempts(webhook_db, [delivery_id])
        assert row["next_attempt_at"].timestamp() - first["started_at"].timestamp() >= 3.0
        drive_retries(retry, lambda: receiver.successes()[delivery_id] == 1)
    early, late = receiver.history(delivery_id)
    assert (early.status, late.status) == (429, 200)
    assert late.received_at - early.received_at >= 2.9  # 3 s, less clock rounding


def test_410_gone_disables_the_subscription(
    env: dict[str, str], webhook_db: str, store: onceonly.Store, queue_name: str, receiver: WebhookReceiver
) -> None:
    webhook_id = subscribe(webhook_db, receiver, Behaviour(failure_rate=1.0, failure_status=410))
    first, later = new_id("evt"), new_id("evt")
    with lambda_env(env) as (dispatch, _):
        dispatch(sqs_event([message(webhook_id, first)]), context("dispatch"))
        sub = subscription(webhook_db, webhook_id)
        assert (sub["enabled"], sub["disabled_reason"]) == (False, "410 Gone from the endpoint")
        dispatch(sqs_event([message(webhook_id, later)]), context("dispatch"))
    ids = [delivery_id_for(webhook_id, first), delivery_id_for(webhook_id, later)]
    rows = deliveries(webhook_db, ids)
    # Both kept for when the subscription is enabled again (test_webhooks_subscriptions.py).
    assert [(rows[i]["status"], rows[i]["response_code"]) for i in ids] == [("held", 410), ("held", None)]
    assert [a["outcome"] for a in attempts(webhook_db, ids)] == ["gone", "disabled"]
    assert receiver.counts() == {ids[0]: 1}  # nothing is sent to a disabled subscription
    assert store.queue(queue_name).depth().total == 0


def test_dead_after_the_last_attempt_and_redrive_requeues(
    env: dict[str, str], webhook_db: str, store: onceonly.Store, queue_name: str, receiver: WebhookReceiver,
    db: psycopg.Connection,
) -> None:
    webhook_id = subscribe(webhook_db, receiver)
    event_id = new_id("evt")
    delivery_id = delivery_id_for(webhook_id, event_id)
    receiver.script(delivery_id, [Reply(500)] * 4)  # the schedule 0.2,0.2,0.2 allows 4 attempts
    with lambda_env(env) as (dispatch, retry):
        dispatch(sqs_event([message(webhook_id, event_id)]), context("dispatch"))
        summaries = drive_retries(retry, lambda: deliveries(webhook_db, [delivery_id])[delivery_id]["status"] == "dead")
        assert sum(s["dead"] for s in summaries) == 1
        assert store.queue(queue_name).depth().total == 0  # a dead delivery leaves the queue
        assert delivery_id in {d["id"] for d in list_dead(db, webhook_id=webhook_id)}
        (redriven,) = redrive(db, store.queue(queue_name), delivery_ids=[delivery_id])
        assert redriven.generation == 1
        drive_retries(retry, lambda: receiver.successes()[delivery_id] == 1)
    assert [r.status for r in receiver.history(delivery_id)] == [500, 500, 500, 500, 200]
    assert {r.webhook_id for r in receiver.history(delivery_id)} == {delivery_id}
    log = attempts(webhook_db, [delivery_id])
    assert [(a["generation"], a["outcome"]) for a in log] == [(0, "failed")] * 4 + [(1, "succeeded")]
    row = deliveries(webhook_db, [delivery_id])[delivery_id]
    assert (row["status"], row["generation"], row["attempts"]) == ("succeeded", 1, 1)
    assert "last of 4 attempts" in (log[3]["error"] or "")


def test_a_refused_url_dead_letters_without_connecting(
    env: dict[str, str], webhook_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    webhook_id = create_subscription(webhook_db, "https://169.254.169.254/latest/meta-data/", new_secret())
    outside: list[Any] = []
    real_connect = socket.socket.connect

    def loopback_only(sock: socket.socket, address: Any) -> Any:
        if isinstance(address, tuple) and not ipaddress.ip_address(address[0]).is_loopback:
            outside.append(address)
            raise ConnectionRefusedError("test guard: not loopback")
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", loopback_only)
    event_id = new_id("evt")
    with lambda_env(env) as (dispatch, _):
        dispatch(sqs_event([message(webhook_id, event_id)]), context("dispatch"))
    delivery_id = delivery_id_for(webhook_id, event_id)
    row = deliveries(webhook_db, [delivery_id])[delivery_id]
    assert row["status"] == "dead" and "link-local" in row["last_error"]
    assert outside == []


@pytest.mark.parametrize("redelivered_after", [1.2, 0.0], ids=["after-the-lease", "within-the-lease"])
def test_a_stranded_delivery_is_recovered_by_the_redelivered_message(
    webhook_db: str, store: onceonly.Store, store_url: str, queue_name: str, receiver: WebhookReceiver,
    db: psycopg.Connection, redelivered_after: float,
) -> None:
    """The dispatcher died after the INSERT and before queueing the safety net: SQS
    redelivers the message, the duplicate path sees a delivery nobody ever
    attempted and re-arms the net. However soon the message comes back (here at
    once, well inside the lease): it may be the last message of that event."""
    env = webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=queue_name, WEBHOOK_CLAIM_BATCH="1",
                      WEBHOOK_CONNECT_TIMEOUT_SECONDS="0.3", WEBHOOK_READ_TIMEOUT_SECONDS="0.5",
                      WEBHOOK_ATTEMPT_LEASE_SECONDS="1")
    webhook_id = subscribe(webhook_db, receiver)
    event_id = new_id("evt")
    delivery_id = records.create(
        db, DeliveryRequest(webhook_id, event_id, "invoice.paid", {"n": 1}, TENANT))
    assert delivery_id is not None
    time.sleep(redelivered_after)
    with lambda_env(env) as (dispatch, retry):
        assert dispatch(sqs_event([message(webhook_id, event_id)]), context("dispatch")) == {"batchItemFailures": []}
        assert store.queue(queue_name).depth().total == 1  # the net is armed; nothing else will bring it back
        summaries = drive_retries(retry, lambda: receiver.successes()[delivery_id] == 1)
    assert sum(s["leases_reclaimed"] for s in summaries) == 1
    assert receiver.counts() == {delivery_id: 1}
