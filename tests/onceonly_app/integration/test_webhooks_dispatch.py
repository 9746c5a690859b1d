"""The real dispatch handler, in process, against PostgreSQL and each coordination
store, POSTing to the local receiver on 127.0.0.1."""

from __future__ import annotations

import json

import onceonly
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.signing import new_secret
from onceonly_cli.testing.receiver import WebhookReceiver
from tests.support.delivery.webhooks import (
    attempts,
    context,
    create_subscription,
    deliveries_for,
    lambda_env,
    message,
    new_id,
    sqs_event,
    webhook_env,
)


def test_delivers_once_with_a_verifiable_signature(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver
) -> None:
    secret = new_secret()
    webhook_id = create_subscription(webhook_db, receiver.endpoint(new_id("ep"), secret), secret)
    event_id = new_id("evt")
    with lambda_env(webhook_env(webhook_db, store_url)) as (dispatch, _):
        response = dispatch(sqs_event([message(webhook_id, event_id)]), context("dispatch"))
    assert response == {"batchItemFailures": []}
    expected_id = delivery_id_for(webhook_id, event_id)
    (received,) = receiver.history()
    assert received.webhook_id == expected_id
    assert received.verified and received.status == 200
    body = json.loads(received.body)
    assert body["type"] == "invoice.paid" and body["data"] == {"invoice": event_id, "amount": 4200}
    (row,) = deliveries_for(webhook_db, [webhook_id])
    assert (row["id"], row["status"], row["attempts"]) == (expected_id, "succeeded", 1)
    assert row["response_code"] == 200
    assert row["delivered_at"] is not None
    (attempt,) = attempts(webhook_db, [expected_id])
    assert (attempt["fence_token"], attempt["outcome"], attempt["recorded"]) == (0, "succeeded", True)


def test_duplicate_messages_create_one_delivery_and_one_post(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver
) -> None:
    secret = new_secret()
    webhook_id = create_subscription(webhook_db, receiver.endpoint(new_id("ep"), secret), secret)
    events = [new_id("evt") for _ in range(3)]
    first_batch = [message(webhook_id, e) for e in events] + [message(webhook_id, events[0])]
    with lambda_env(webhook_env(webhook_db, store_url)) as (dispatch, _):
        assert dispatch(sqs_event(first_batch), context("dispatch")) == {"batchItemFailures": []}
        # the same messages again, as SQS redelivers them: nothing new happens
        assert dispatch(sqs_event(first_batch[:2]), context("dispatch")) == {"batchItemFailures": []}
    expected = {delivery_id_for(webhook_id, e) for e in events}
    assert receiver.counts() == dict.fromkeys(expected, 1)
    assert receiver.successes() == dict.fromkeys(expected, 1)
    assert {r["id"] for r in deliveries_for(webhook_db, [webhook_id])} == expected
    assert len(attempts(webhook_db, sorted(expected))) == 3


def test_malformed_records_fail_alone(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver
) -> None:
    secret = new_secret()
    webhook_id = create_subscription(webhook_db, receiver.endpoint(new_id("ep"), secret), secret)
    good = [new_id("evt"), new_id("evt")]
    bodies = [
        message(webhook_id, good[0]),
        "{not json",
        json.dumps({"webhook_id": webhook_id, "event_type": "x", "payload": {}}),  # no event_id
        message(new_id("no-such-webhook"), new_id("evt")),
        json.dumps(["a", "list"]),
        message(webhook_id, good[1]),
    ]
    event = sqs_event(bodies)
    with lambda_env(webhook_env(webhook_db, store_url)) as (dispatch, _):
        response = dispatch(event, context("dispatch"))
    bad_ids = [record["messageId"] for record in event["Records"][1:5]]
    assert sorted(f["itemIdentifier"] for f in response["batchItemFailures"]) == sorted(bad_ids)
    assert receiver.successes() == {delivery_id_for(webhook_id, e): 1 for e in good}
    assert {r["event_id"] for r in deliveries_for(webhook_db, [webhook_id])} == set(good)
