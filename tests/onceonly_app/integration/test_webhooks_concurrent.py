"""The records of one batch are delivered concurrently: the real handlers, in
process, against PostgreSQL and each coordination store, POSTing to the local
receiver on 127.0.0.1, which records when each request arrived and when it was
answered (so how many were in flight at once is read from its history).

- WEBHOOK_MAX_IN_FLIGHT bounds the requests in flight, for the dispatcher's SQS
  batch and for the retry function's claimed batch;
- by default one subscription's records go concurrently too (no order is
  promised); under WEBHOOK_SERIAL_PER_SUBSCRIPTION one after another in batch
  order (no overtaking inside a batch);
- near the invocation's deadline no new request starts: the unstarted records
  come back as batch failures, with nothing written."""

from __future__ import annotations

import time
from typing import Any

import onceonly
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.signing import new_secret
from onceonly_cli.testing.receiver import Behaviour, WebhookReceiver
from tests.support.delivery.webhooks import (
    attempts,
    context,
    create_subscription,
    deliveries_for,
    drive_retries,
    lambda_env,
    message,
    most_in_flight,
    new_id,
    sqs_event,
    webhook_env,
)
from tests.support.functions.function_clients import open_function_clients

LATENCY = 0.3  # each endpoint answers after this, so the requests of one round overlap
# For the deadline: 3 s attempts, 2 s answers, a 7.5 s invocation (the tests say why).
SHORT_ATTEMPTS = {"WEBHOOK_CONNECT_TIMEOUT_SECONDS": "0.5", "WEBHOOK_READ_TIMEOUT_SECONDS": "2.5"}
LATE = 2.0
INVOCATION = 7.5


def subscriptions(db: str, receiver: WebhookReceiver, n: int, behaviour: Behaviour) -> list[str]:
    ids = []
    for _ in range(n):
        secret = new_secret()
        ids.append(create_subscription(db, receiver.endpoint(new_id("ep"), secret, behaviour), secret))
    return ids


def one_event_each(subs: list[str]) -> tuple[list[str], dict[str, Any]]:
    """A new event for each subscription, and the SQS batch of their messages."""
    events = [new_id("evt") for _ in subs]
    return events, sqs_event([message(w, e) for w, e in zip(subs, events, strict=True)])


def test_a_batch_is_delivered_with_at_most_max_in_flight_requests_at_once(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver
) -> None:
    subs = subscriptions(webhook_db, receiver, 10, Behaviour(latency=LATENCY))
    events, event = one_event_each(subs)
    with lambda_env(webhook_env(webhook_db, store_url, WEBHOOK_MAX_IN_FLIGHT="4")) as (dispatch, _):
        started = time.monotonic()
        assert dispatch(event, context("dispatch")) == {"batchItemFailures": []}
        took = time.monotonic() - started
    expected = {delivery_id_for(w, e) for w, e in zip(subs, events, strict=True)}
    assert receiver.successes() == dict.fromkeys(expected, 1)  # each once, signed and answered 2xx
    assert all(r.verified for r in receiver.history())
    assert most_in_flight(receiver.history()) == 4  # concurrent, and never more than the bound
    assert took < 10 * LATENCY  # three rounds of 4, 4 and 2, not ten requests one after another
    rows = deliveries_for(webhook_db, subs)
    assert {(r["status"], r["attempts"], r["fence_token"]) for r in rows} == {("succeeded", 1, 0)}
    assert len(attempts(webhook_db, sorted(expected))) == 10


def test_the_retry_function_attempts_its_claimed_batch_concurrently(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver
) -> None:
    # Every first attempt fails, so the four deliveries wait in the due queue;
    # the retry function claims all four at once and retries them together.
    subs = subscriptions(webhook_db, receiver, 4, Behaviour(latency=LATENCY, fail_first=1))
    events, event = one_event_each(subs)
    expected = {delivery_id_for(w, e) for w, e in zip(subs, events, strict=True)}
    env = webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=new_id("webhook-retries"), WEBHOOK_CLAIM_BATCH="4",
                      WEBHOOK_MAX_IN_FLIGHT="4")
    with lambda_env(env) as (dispatch, retry):
        dispatch(event, context("dispatch"))
        time.sleep(0.3)  # the schedule's 0.2 s first retry delay: all four are due at the first claim
        summaries = drive_retries(retry, lambda: set(receiver.successes()) == expected)
    retried = [r for r in receiver.history() if r.nth == 2]
    assert len(retried) == 4 and all(r.accepted and r.verified for r in retried)
    assert most_in_flight(retried) == 4
    assert sum(s["succeeded"] for s in summaries) == 4 and sum(s["claims_failed"] for s in summaries) == 0
    assert {(r["status"], r["attempts"]) for r in deliveries_for(webhook_db, subs)} == {("succeeded", 2)}


def test_by_default_one_subscriptions_records_go_concurrently_too(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver
) -> None:
    (webhook_id,) = subscriptions(webhook_db, receiver, 1, Behaviour(latency=LATENCY))
    events = [new_id("evt") for _ in range(5)]
    with lambda_env(webhook_env(webhook_db, store_url)) as (dispatch, _):
        assert dispatch(sqs_event([message(webhook_id, e) for e in events]), context("dispatch")) == {
            "batchItemFailures": []}
    assert receiver.successes() == dict.fromkeys((delivery_id_for(webhook_id, e) for e in events), 1)
    assert most_in_flight(receiver.history()) == 5  # no order is promised (docs/webhooks.md), so none is kept


def test_serial_per_subscription_sends_its_records_one_after_another_in_batch_order(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver
) -> None:
    first, second = subscriptions(webhook_db, receiver, 2, Behaviour(latency=LATENCY))
    events = [new_id("evt") for _ in range(8)]
    owners = [first, second] * 4  # interleaved in the batch
    event = sqs_event([message(w, e) for w, e in zip(owners, events, strict=True)])
    env = webhook_env(webhook_db, store_url, WEBHOOK_SERIAL_PER_SUBSCRIPTION="true")
    with lambda_env(env) as (dispatch, _):
        assert dispatch(event, context("dispatch")) == {"batchItemFailures": []}
    for webhook_id in (first, second):
        in_batch_order = [delivery_id_for(webhook_id, e) for w, e in zip(owners, events, strict=True)
                          if w == webhook_id]
        received = sorted((r for r in receiver.history() if r.webhook_id in in_batch_order),
                          key=lambda r: r.received_at)
        assert [r.webhook_id for r in received] == in_batch_order
        # each one only after the one before it was answered: never two at once
        assert most_in_flight(received) == 1
        assert all(r.accepted for r in received)
    assert most_in_flight(receiver.history()) == 2  # the two subscriptions did go concurrently


def test_near_the_deadline_unstarted_records_come_back_as_batch_failures(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver
) -> None:
    # An attempt needs 0.5 + 2.5 = 3 s plus the 1 s margin: it starts only with
    # more than 4 s left. With 7.5 s, two rounds of two 2 s requests start (at
    # about 0 and 2 s, 1.5 s to spare for a slow store); the third round, at
    # about 4 s, finds 3.5 s left at most.
    subs = subscriptions(webhook_db, receiver, 6, Behaviour(latency=LATE))
    events, event = one_event_each(subs)
    env = webhook_env(webhook_db, store_url, WEBHOOK_MAX_IN_FLIGHT="2", **SHORT_ATTEMPTS)
    with lambda_env(env) as (dispatch, _):
        open_function_clients()  # a warm container: the rounds are the requests, not the connects
        invocation = context("dispatch", timeout=INVOCATION)  # its clock starts now, the handler loaded
        response = dispatch(event, invocation)
    assert invocation.get_remaining_time_in_millis() > 1000  # it ended well before Lambda would have killed it
    unstarted = [r["messageId"] for r in event["Records"][4:]]
    assert [f["itemIdentifier"] for f in response["batchItemFailures"]] == unstarted
    started = {delivery_id_for(w, e) for w, e in zip(subs[:4], events[:4], strict=True)}
    assert receiver.successes() == dict.fromkeys(started, 1)  # nothing sent for the unstarted two
    assert {r["id"] for r in deliveries_for(webhook_db, subs)} == started  # and nothing written for them


def test_a_record_waiting_for_its_subscriptions_turn_is_not_started_late(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver
) -> None:
    # The same budget as above, but one subscription's three records: the third
    # would start at about 4 s, with too little time left, so it is not started.
    (webhook_id,) = subscriptions(webhook_db, receiver, 1, Behaviour(latency=LATE))
    events = [new_id("evt") for _ in range(3)]
    event = sqs_event([message(webhook_id, e) for e in events])
    env = webhook_env(webhook_db, store_url, WEBHOOK_SERIAL_PER_SUBSCRIPTION="true", **SHORT_ATTEMPTS)
    with lambda_env(env) as (dispatch, _):
        open_function_clients()
        response = dispatch(event, context("dispatch", timeout=INVOCATION))
    assert [f["itemIdentifier"] for f in response["batchItemFailures"]] == [event["Records"][2]["messageId"]]
    assert set(receiver.successes()) == {delivery_id_for(webhook_id, e) for e in events[:2]}
