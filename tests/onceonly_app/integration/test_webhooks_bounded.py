"""Deliveries that always end, with the real handlers in
process, on the real PostgreSQL, POSTing to the local receiver on 127.0.0.1:

- an attempt counts when it starts, so a delivery whose attempts crash the
  worker (or whose response cannot be read) still dead-letters on schedule;
- a hostile Retry-After is ignored instead of crashing every worker;
- one failing claim costs neither the other claims of the run nor their acks;
- one deadline bounds an attempt against an endpoint that trickles bytes;
- the dispatcher starts no record it cannot finish before its deadline;
- a store outage sends the dispatcher's records back with a growing
  visibility timeout, not towards the dead-letter queue like malformed ones.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from psycopg_pool import ConnectionPool

import onceonly
from onceonly.errors import StoreUnavailableError
from onceonly_app.webhooks import deliveries as records
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.dispatch_batch import outage_visibility
from onceonly_app.webhooks.sender import SendResult, WebhookSender
from onceonly_cli.testing.receiver import Behaviour, Reply, WebhookReceiver
from tests.support.delivery.webhooks import (
    attempts,
    context,
    deliveries,
    drive_retries,
    lambda_env,
    message,
    new_id,
    sleep_until_due,
    sqs_event,
    subscribe,
    webhook_env,
)
from tests.support.functions.events import scheduled_event
from tests.support.jobs.jobs_helpers import aws_client

# The schedule of webhook_env ("0.2,0.2,0.2") allows 4 attempts.
MAX_ATTEMPTS = 4


@pytest.fixture
def store_url(postgres_url: str) -> Iterator[str]:
    """The coordination store of these tests: PostgreSQL (the claim itself is
    proven per store elsewhere; here the delivery logic is under test)."""
    store = onceonly.connect(postgres_url)
    store.setup()
    store.close()
    yield postgres_url


@pytest.fixture
def queue_name() -> str:
    return new_id("webhook-retries")


def _status(db: str, delivery_id: str) -> str:
    return str(deliveries(db, [delivery_id])[delivery_id]["status"])


def test_a_hostile_retry_after_neither_crashes_the_workers_nor_extends_the_schedule(
    webhook_db: str, store_url: str, queue_name: str, receiver: WebhookReceiver
) -> None:
    """``Retry-After: ²`` passed str.isdigit() and made float() raise in every
    worker that claimed the delivery: it was POSTed again and again, forever
    'attempting'. It is not RFC 9110 delay-seconds: it is ignored."""
    webhook_id = subscribe(webhook_db, receiver, Behaviour(failure_rate=1.0, failure_status=503,
                                                           retry_after="\u00b2"))
    event_id = new_id("evt")
    delivery_id = delivery_id_for(webhook_id, event_id)
    with lambda_env(webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=queue_name)) as (dispatch, retry):
        assert dispatch(sqs_event([message(webhook_id, event_id)]), context("dispatch")) == {"batchItemFailures": []}
        drive_retries(retry, lambda: _status(webhook_db, delivery_id) == "dead")
    assert receiver.counts() == {delivery_id: MAX_ATTEMPTS}
    row = deliveries(webhook_db, [delivery_id])[delivery_id]
    assert (row["attempts"], row["response_code"]) == (MAX_ATTEMPTS, 503)
    log = attempts(webhook_db, [delivery_id])
    assert [(a["attempt"], a["outcome"], a["recorded"]) for a in log] == [
        (n, "failed", True) for n in range(1, MAX_ATTEMPTS + 1)]


def test_an_attempt_that_never_records_its_outcome_still_counts(
    webhook_db: str, store_url: str, queue_name: str, receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every attempt POSTs and then the worker fails before recording anything
    (as a crash, or a response it cannot read, would). The delivery is claimed
    again when each lease ends; because the attempt was counted when it started,
    the schedule's limit ends it: exactly 4 POSTs, then dead without a 5th."""
    real_post = WebhookSender.post

    def post_then_fail(self: WebhookSender, *args: Any, **kwargs: Any) -> SendResult:
        real_post(self, *args, **kwargs)
        raise RuntimeError("the worker could not read the response")

    monkeypatch.setattr(WebhookSender, "post", post_then_fail)
    webhook_id = subscribe(webhook_db, receiver)
    event_id = new_id("evt")
    delivery_id = delivery_id_for(webhook_id, event_id)
    env = webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=queue_name, WEBHOOK_CLAIM_BATCH="1",
                      WEBHOOK_CONNECT_TIMEOUT_SECONDS="0.3", WEBHOOK_READ_TIMEOUT_SECONDS="0.5",
                      WEBHOOK_ATTEMPT_LEASE_SECONDS="1")
    with lambda_env(env) as (dispatch, retry):
        with pytest.raises(BatchProcessingError):  # its only record failed: the whole batch goes back
            dispatch(sqs_event([message(webhook_id, event_id)]), context("dispatch"))
        summaries = drive_retries(retry, lambda: _status(webhook_db, delivery_id) == "dead")
    assert receiver.counts() == {delivery_id: MAX_ATTEMPTS}
    assert sum(s["claims_failed"] for s in summaries) == MAX_ATTEMPTS - 1  # the dispatcher's was the 1st
    row = deliveries(webhook_db, [delivery_id])[delivery_id]
    assert (row["status"], row["attempts"]) == ("dead", MAX_ATTEMPTS)
    (log,) = attempts(webhook_db, [delivery_id])  # the only outcome ever recorded
    assert (log["attempt"], log["outcome"], log["recorded"]) == (MAX_ATTEMPTS, "failed", True)
    assert "no outcome was recorded for the last of 4 attempts" in log["error"]


def test_one_failing_claim_costs_neither_the_other_claims_nor_their_acks(
    webhook_db: str, store_url: str, queue_name: str, receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    poisoned_id, healthy_id = subscribe(webhook_db, receiver), subscribe(webhook_db, receiver)
    events = {w: new_id("evt") for w in (poisoned_id, healthy_id)}
    poisoned, healthy = (delivery_id_for(w, e) for w, e in events.items())
    for delivery_id in (poisoned, healthy):
        receiver.script(delivery_id, [Reply(500)])  # both wait for a retry after the first attempt
    with lambda_env(webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=queue_name)) as (dispatch, retry):
        dispatch(sqs_event([message(w, e) for w, e in events.items()]), context("dispatch"))
        sleep_until_due(webhook_db, poisoned)
        sleep_until_due(webhook_db, healthy)
        real_post = WebhookSender.post

        def poison_one(self: WebhookSender, target: Any, body: str, headers: dict[str, str],
                       *args: Any) -> SendResult:
            if headers["webhook-id"] == poisoned:
                raise RuntimeError("poison")
            return real_post(self, target, body, headers, *args)

        monkeypatch.setattr(WebhookSender, "post", poison_one)
        summary = retry(scheduled_event("webhook_retry"), context("retry", 20))  # one run claims both (batch of 4)
    assert (summary["claimed"], summary["claims_failed"], summary["succeeded"]) == (2, 1, 1)
    assert receiver.successes() == {healthy: 1}
    assert _status(webhook_db, healthy) == "succeeded"
    due = onceonly.connect(store_url).queue(queue_name)
    assert due.depth().total == 1  # the healthy claim was acked; the poisoned one waits for its lease


def test_a_trickling_endpoint_is_cut_off_at_the_attempt_deadline(
    webhook_db: str, store_url: str, queue_name: str, receiver: WebhookReceiver
) -> None:
    """The answer comes a byte every 50 ms: no read ever times out, and the whole
    answer would take about 8 s. WEBHOOK_ATTEMPT_TIMEOUT_SECONDS (1 s) ends the attempt."""
    bound = 1.0
    webhook_id = subscribe(webhook_db, receiver)
    event_id = new_id("evt")
    delivery_id = delivery_id_for(webhook_id, event_id)
    receiver.script(delivery_id, [Reply(200, trickle=0.05)])
    env = webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=queue_name, WEBHOOK_ATTEMPT_TIMEOUT_SECONDS=str(bound))
    with lambda_env(env) as (dispatch, _):
        assert dispatch(sqs_event([message(webhook_id, event_id)]), context("dispatch")) == {"batchItemFailures": []}
    row = deliveries(webhook_db, [delivery_id])[delivery_id]
    assert (row["status"], row["last_error"]) == ("retrying", "timeout: the attempt's deadline passed")
    (log,) = attempts(webhook_db, [delivery_id])
    assert (log["finished_at"] - log["started_at"]).total_seconds() < 2 * bound


def test_the_dispatcher_does_not_start_records_it_cannot_finish_in_time(
    webhook_db: str, store_url: str, queue_name: str, receiver: WebhookReceiver
) -> None:
    """Each answer takes 0.8 s and an attempt may take up to 1 s, with 1 s of
    margin: a 3.5 s invocation sending one at a time cannot do 5 records. The ones
    it does not start are batch item failures with nothing written, and it ends
    before its deadline. (Sending concurrently: test_webhooks_concurrent.py.)"""
    webhook_id = subscribe(webhook_db, receiver, Behaviour(latency=0.8))
    events = [new_id("evt") for _ in range(5)]
    env = webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=queue_name, WEBHOOK_ATTEMPT_TIMEOUT_SECONDS="1",
                      WEBHOOK_DEADLINE_MARGIN_SECONDS="1", WEBHOOK_MAX_IN_FLIGHT="1")
    event = sqs_event([message(webhook_id, e) for e in events])
    invocation = context("dispatch", timeout=3.5)
    with lambda_env(env) as (dispatch, _):
        failed = {f["itemIdentifier"] for f in dispatch(event, invocation)["batchItemFailures"]}
    assert invocation.get_remaining_time_in_millis() > 0
    started = [e for e, r in zip(events, event["Records"], strict=True) if r["messageId"] not in failed]
    not_started = [e for e, r in zip(events, event["Records"], strict=True) if r["messageId"] in failed]
    assert started and not_started  # the first always starts; 5 x 0.8 s cannot fit
    assert started == events[:len(started)]  # records are taken in order, and skipped from one on
    rows = deliveries(webhook_db, [delivery_id_for(webhook_id, e) for e in events])
    assert set(rows) == {delivery_id_for(webhook_id, e) for e in started}  # nothing written for the rest
    assert receiver.successes() == {delivery_id_for(webhook_id, e): 1 for e in started}


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_store_outage_sends_records_back_later_not_towards_the_dead_letter_queue(
    webhook_db: str, store_url: str, queue_name: str, receiver: WebhookReceiver, moto_endpoint: str, unique: str
) -> None:
    """The coordination store goes down. In one batch: a record done before the
    outage is done (not sent back); a malformed record fails as always (SQS
    brings it back after the queue's visibility timeout, and after
    maxReceiveCount moves it to the DLQ); the valid records stop at the first
    unavailable store and come back only after a backoff that grows with their
    receive count. Once the store is back, every valid event is delivered."""
    short = {"WEBHOOK_QUEUE": queue_name, "WEBHOOK_CLAIM_BATCH": "1", "WEBHOOK_CONNECT_TIMEOUT_SECONDS": "0.3",
             "WEBHOOK_READ_TIMEOUT_SECONDS": "0.5", "WEBHOOK_ATTEMPT_LEASE_SECONDS": "1"}
    webhook_id = subscribe(webhook_db, receiver)
    done, *held = (new_id("evt") for _ in range(4))
    with lambda_env(webhook_env(webhook_db, store_url, **short)) as (dispatch, _):
        dispatch(sqs_event([message(webhook_id, done)]), context("dispatch"))  # delivered before the outage

    sqs = aws_client("sqs", moto_endpoint)
    queue_url = sqs.create_queue(QueueName=f"dispatch-{unique}", Attributes={"VisibilityTimeout": "0"})["QueueUrl"]
    bodies = [message(webhook_id, done), "{not json", *(message(webhook_id, e) for e in held)]  # batch order
    for body in bodies:
        sqs.send_message(QueueUrl=queue_url, MessageBody=body)
    received = {m["Body"]: m for m in sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)["Messages"]}
    assert set(received) == set(bodies)
    event = sqs_event(bodies)
    for record in event["Records"]:
        record.update(messageId=received[record["body"]]["MessageId"],
                      receiptHandle=received[record["body"]]["ReceiptHandle"])
    down = webhook_env(webhook_db, f"redis://127.0.0.1:{_closed_port()}/0", **short,
                       WEBHOOK_QUEUE_URL=queue_url, AWS_ENDPOINT_URL_SQS=moto_endpoint)

    with lambda_env(down) as (dispatch, _):
        failed = {f["itemIdentifier"] for f in dispatch(event, context("dispatch"))["batchItemFailures"]}

    ids = [r["messageId"] for r in event["Records"]]
    assert failed == set(ids[1:])  # the duplicate needed no store; nothing valid is lost
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=event["Records"][0]["receiptHandle"])  # as Lambda does
    # The malformed record is visible again at once (this queue's visibility
    # timeout is 0); the valid ones are held back by the outage backoff.
    again = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in again] == ["{not json"]
    assert receiver.counts() == {delivery_id_for(webhook_id, done): 1}

    # The store is back; SQS brings the held-back records again. The first one's
    # delivery was created before the outage stopped it: its safety net is re-armed.
    expected = {delivery_id_for(webhook_id, e): 1 for e in [done, *held]}
    with lambda_env(webhook_env(webhook_db, store_url, **short)) as (dispatch, retry):
        redelivered = sqs_event([message(webhook_id, e) for e in held])
        assert dispatch(redelivered, context("dispatch")) == {"batchItemFailures": []}
        drive_retries(retry, lambda: receiver.successes() == expected)


@pytest.mark.parametrize(("receive_count", "seconds"), [(1, 60), (2, 120), (5, 960), (11, 43_200), (40, 43_200)])
def test_the_outage_backoff_doubles_up_to_the_longest_visibility_timeout(receive_count: int, seconds: int) -> None:
    assert outage_visibility(receive_count) == seconds



def test_an_unreachable_domain_database_is_a_store_outage_not_a_driver_error() -> None:
    """What the dispatcher and the retry run tell apart from a bad message or a
    bad claim: StoreUnavailableError, raised from the driver's error."""
    url = f"postgresql://postgres@127.0.0.1:{_closed_port()}/nowhere"
    with ConnectionPool(url, min_size=0, max_size=1, timeout=0.5, open=True) as pool, \
            pytest.raises(StoreUnavailableError, match="domain database unavailable") as info, \
            records.connection(pool) as conn:
        records.state(conn, "msg_any")
    assert isinstance(info.value.__cause__, psycopg.OperationalError)
