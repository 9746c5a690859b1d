"""A replica killed mid-attempt, and a replica frozen past its lease.

- Crash: the dispatcher is SIGKILLed while its POST is in flight (the receiver
  holds the request). After the lease the retry worker reclaims the delivery and
  delivers it; the repeat carries the same webhook-id, which is how the
  receiver dedupes this at-least-once case.
- Retry crash: the same, but the one killed is a retry worker holding a claim
  from the due queue; the next claim (higher token) takes over its stamp.
- Crash with several POSTs in flight: the dispatcher is SIGKILLed with five
  requests of one batch held by the receiver and a sixth record waiting for a
  free slot. SQS brings the whole batch back; with the retry
  worker, every delivery ends succeeded exactly once, and only a request the
  killed replica never recorded is repeated, under its own webhook-id.
- Fencing: a retry worker is SIGSTOPped after sending its POST, past its lease.
  Another worker reclaims and delivers. When the frozen one wakes up with its
  (failed) response, its write is refused: the newer result stands."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

import onceonly
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.signing import new_secret
from onceonly_cli.testing.receiver import ReceivedRequest, Reply, WebhookReceiver
from tests.support.delivery.webhook_workers import kill_mid_request, kill_when, lone_worker
from tests.support.delivery.webhooks import (
    attempts,
    context,
    create_subscription,
    deliveries,
    drive_retries,
    lambda_env,
    message,
    most_in_flight,
    new_id,
    sleep_until_due,
    sqs_event,
    webhook_env,
)
from tests.support.functions.events import scheduled_event
from tests.support.races.race import CTX, read_histories

pytestmark = pytest.mark.concurrency
# One claim per batch, a 1 s connect + 4 s read timeout, so a 6 s lease: the
# tests wait for the lease by polling, never by a tight sleep.
SHORT_LEASE = {"WEBHOOK_CLAIM_BATCH": "1", "WEBHOOK_CONNECT_TIMEOUT_SECONDS": "1", "WEBHOOK_READ_TIMEOUT_SECONDS": "4",
               "WEBHOOK_ATTEMPT_LEASE_SECONDS": "6"}
WAIT = 30.0


def _setup(db: str, store_url: str, rx: WebhookReceiver) -> tuple[dict[str, str], str, str]:
    env = webhook_env(db, store_url, WEBHOOK_QUEUE=new_id("webhook-retries"), **SHORT_LEASE)
    secret = new_secret()
    webhook_id = create_subscription(db, rx.endpoint(new_id("ep"), secret), secret)
    return env, webhook_id, new_id("evt")


def _finish(proc: object) -> None:
    proc.join(WAIT)  # type: ignore[attr-defined]
    if proc.is_alive():  # type: ignore[attr-defined]
        proc.kill()  # type: ignore[attr-defined]
        proc.join()  # type: ignore[attr-defined]
        pytest.fail("the worker process did not finish")


def test_a_replica_killed_mid_attempt_is_reclaimed_and_delivered_with_the_same_id(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver, tmp_path: Path
) -> None:
    env, webhook_id, event_id = _setup(webhook_db, store_url, receiver)
    delivery_id = delivery_id_for(webhook_id, event_id)
    gate = threading.Event()
    # The endpoint takes the request and answers 200, but only after the kill:
    # the sender never learns it, so the repeat is the at-least-once case.
    receiver.script(delivery_id, [Reply(200, hold=gate)])
    event = sqs_event([message(webhook_id, event_id)])
    exitcode = kill_mid_request("webhook_dispatch", event, tmp_path / "dispatch.jsonl", env,
                                receiver, delivery_id, gate, timeout=WAIT)
    assert exitcode == -signal.SIGKILL
    assert attempts(webhook_db, [delivery_id]) == []  # it died before recording anything

    with lambda_env(env) as (_, retry):
        summaries = drive_retries(retry, lambda: len(receiver.history(delivery_id)) == 2, timeout=WAIT)
    first, repeat = receiver.history(delivery_id)
    assert first.webhook_id == repeat.webhook_id == delivery_id and first.verified and repeat.verified
    assert repeat.status == 200 and repeat.received_at > first.received_at
    assert sum(s["leases_reclaimed"] for s in summaries) == 1
    (attempt,) = attempts(webhook_db, [delivery_id])
    assert attempt["recorded"] and attempt["fence_token"] >= 1 and attempt["outcome"] == "succeeded"
    assert deliveries(webhook_db, [delivery_id])[delivery_id]["status"] == "succeeded"
    assert read_histories(tmp_path) == []  # the killed replica never returned


def test_a_replica_killed_with_several_posts_in_flight_delivers_each_exactly_once(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver, tmp_path: Path
) -> None:
    env, _, _ = _setup(webhook_db, store_url, receiver)
    env["WEBHOOK_MAX_IN_FLIGHT"] = "5"
    owners = []
    for _ in range(6):
        secret = new_secret()
        owners.append(create_subscription(webhook_db, receiver.endpoint(new_id("ep"), secret), secret))
    # Six records, five in flight at most: the first five are held by their
    # endpoints until after the kill; the sixth waits for a free slot and is
    # never started by the killed replica.
    events = [new_id("evt") for _ in owners]
    ids = [delivery_id_for(w, e) for w, e in zip(owners, events, strict=True)]
    gate = threading.Event()
    for delivery_id in ids[:5]:
        receiver.script(delivery_id, [Reply(200, hold=gate)])
    event = sqs_event([message(w, e) for w, e in zip(owners, events, strict=True)])

    def all_five_held(requests: list[ReceivedRequest]) -> bool:
        return len({r.webhook_id for r in requests if r.status is None}) == 5

    exitcode = kill_when("webhook_dispatch", event, tmp_path / "dispatch.jsonl", env, receiver, all_five_held,
                         gate, timeout=WAIT)
    assert exitcode == -signal.SIGKILL
    killed_mid_flight = receiver.history()
    assert most_in_flight(killed_mid_flight) == 5  # the killed replica really had five POSTs out at once
    assert attempts(webhook_db, ids) == []  # it died before recording any outcome
    assert ids[5] not in {r.webhook_id for r in killed_mid_flight}  # the sixth never started

    with lambda_env(env) as (dispatch, retry):
        # SQS brings the unanswered batch back: the held ones are duplicates now
        # (their safety nets are in the due queue), the unstarted one is new.
        assert dispatch(event, context("dispatch")) == {"batchItemFailures": []}
        drive_retries(retry, lambda: set(receiver.successes()) >= set(ids), timeout=WAIT)
    rows = deliveries(webhook_db, ids)
    assert {rows[i]["status"] for i in ids} == {"succeeded"}
    for delivery_id in ids:  # each delivery has exactly one recorded success
        log = attempts(webhook_db, [delivery_id])
        assert [a["outcome"] for a in log if a["recorded"]] == ["succeeded"], log
    requests = receiver.history()
    assert {r.webhook_id for r in requests} == set(ids) and all(r.verified for r in requests)
    by_id = {i: [r for r in requests if r.webhook_id == i] for i in ids}
    # The five the killed replica held: sent again, under the same webhook-id and
    # with the same body; the unstarted one: sent once.
    assert [len(by_id[i]) for i in ids] == [2, 2, 2, 2, 2, 1]
    assert all(len({r.body for r in by_id[i]}) == 1 for i in ids)
    assert read_histories(tmp_path) == []  # the killed replica never returned


def test_a_retry_worker_killed_mid_attempt_is_reclaimed_and_delivered_with_the_same_id(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver, tmp_path: Path
) -> None:
    env, webhook_id, event_id = _setup(webhook_db, store_url, receiver)
    delivery_id = delivery_id_for(webhook_id, event_id)
    gate = threading.Event()
    # dispatcher: 500, so the delivery waits in the due queue; the retry worker
    # that claims it: 200, but only after the kill; the reclaimer: 200.
    receiver.script(delivery_id, [Reply(500), Reply(200, hold=gate)])
    with lambda_env(env) as (dispatch, retry):
        dispatch(sqs_event([message(webhook_id, event_id)]), context("dispatch"))
        sleep_until_due(webhook_db, delivery_id)
        exitcode = kill_mid_request("webhook_retry", scheduled_event("webhook_retry"), tmp_path / "retry.jsonl", env,
                                    receiver, delivery_id, gate, timeout=WAIT)
        assert exitcode == -signal.SIGKILL
        stamped = deliveries(webhook_db, [delivery_id])[delivery_id]
        # its claim, and its attempt (counted when it started), never its outcome
        assert (stamped["status"], stamped["attempts"]) == ("attempting", 2)
        killed_token = stamped["fence_token"]
        assert killed_token >= 1
        assert [a["fence_token"] for a in attempts(webhook_db, [delivery_id])] == [0]  # the dispatcher's only

        summaries = drive_retries(retry, lambda: len(receiver.history(delivery_id)) == 3, timeout=WAIT)
    dispatched, killed, repeat = receiver.history(delivery_id)
    assert {r.webhook_id for r in (dispatched, killed, repeat)} == {delivery_id}
    assert dispatched.verified and killed.verified and repeat.verified
    assert (dispatched.status, repeat.status) == (500, 200) and repeat.received_at > killed.received_at
    assert sum(s["leases_reclaimed"] for s in summaries) == 1
    log = attempts(webhook_db, [delivery_id])
    assert [(a["fence_token"], a["attempt"], a["outcome"], a["recorded"]) for a in log] == [
        (0, 1, "failed", True), (log[-1]["fence_token"], 3, "succeeded", True)]
    assert log[-1]["fence_token"] > killed_token  # the killed claim left no outcome; a newer one did
    assert [a["response_code"] for a in log if 200 <= (a["response_code"] or 0) < 300] == [200]
    row = deliveries(webhook_db, [delivery_id])[delivery_id]
    assert (row["status"], row["response_code"], row["attempts"]) == ("succeeded", 200, 3)  # the killed one counts
    assert row["fence_token"] == log[-1]["fence_token"]
    assert read_histories(tmp_path) == []  # the killed worker never returned


def test_a_worker_frozen_past_its_lease_cannot_overwrite_the_newer_result(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver, tmp_path: Path
) -> None:
    env, webhook_id, event_id = _setup(webhook_db, store_url, receiver)
    delivery_id = delivery_id_for(webhook_id, event_id)
    held = threading.Event()
    # dispatcher: 500; the frozen worker: 500 once released; the reclaimer: 200
    receiver.script(delivery_id, [Reply(500), Reply(500, hold=held)])
    with lambda_env(env) as (dispatch, retry):
        dispatch(sqs_event([message(webhook_id, event_id)]), context("dispatch"))
        assert receiver.wait_for(lambda reqs: len(reqs) == 1, timeout=WAIT)
        sleep_until_due(webhook_db, delivery_id)  # the frozen worker must find it claimable
        frozen = CTX.Process(target=lone_worker,
                             args=("webhook_retry", scheduled_event("webhook_retry"), tmp_path / "frozen.jsonl", env))
        frozen.start()
        try:
            assert receiver.wait_for(lambda reqs: len(reqs) == 2, timeout=WAIT)  # its POST arrived
            os.kill(frozen.pid, signal.SIGSTOP)
            held.set()  # the 500 waits in the frozen worker's socket
            # another worker reclaims once the lease runs out, and delivers
            drive_retries(retry, lambda: receiver.successes()[delivery_id] == 1, timeout=WAIT)
            row = deliveries(webhook_db, [delivery_id])[delivery_id]
            assert (row["status"], row["response_code"]) == ("succeeded", 200)
        finally:
            held.set()
            os.kill(frozen.pid, signal.SIGCONT)
        _finish(frozen)

    (summary,) = read_histories(tmp_path)
    assert summary["response"]["fenced_writes_refused"] == 1
    assert summary["response"]["succeeded"] == summary["response"]["failed"] == 0
    row = deliveries(webhook_db, [delivery_id])[delivery_id]
    assert (row["status"], row["response_code"], row["last_error"]) == ("succeeded", 200, None)
    log = attempts(webhook_db, [delivery_id])
    assert [(a["outcome"], a["recorded"]) for a in log] == [("failed", True), ("succeeded", True), ("failed", False)]
    dispatcher_token, newer_token, stale_token = (a["fence_token"] for a in log)
    assert dispatcher_token == 0 < stale_token < newer_token == row["fence_token"]
    assert {r.webhook_id for r in receiver.history()} == {delivery_id}
