"""Replicas: 8 OS processes run the real webhook handlers at once against one
PostgreSQL and one coordination store (each backend), POSTing to the local
receiver, which verifies every signature and records every request.

The evidence is the receiver's history and the attempts table, never a counter
shared with the workers."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import onceonly
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.signing import new_secret
from onceonly_cli.testing.receiver import Behaviour, WebhookReceiver
from tests.support.delivery.webhook_workers import dispatch_worker, retry_worker
from tests.support.delivery.webhooks import (
    attempts,
    context,
    create_subscription,
    deliveries,
    lambda_env,
    message,
    new_id,
    sqs_event,
    webhook_env,
)
from tests.support.races.race import run_workers

pytestmark = [pytest.mark.concurrency, pytest.mark.processes]
WORKERS = 8
EVENTS = 48
BATCH = 10


def _feed(webhook_ids: list[str], rng: random.Random) -> tuple[list[str], list[list[dict[str, Any]]]]:
    """EVENTS events spread over the subscriptions. Every worker gets every
    message (as SQS may hand one message to several invocations), in its own
    shuffled order and SQS batches: all workers race for each delivery, and a
    run where they did not overlap would show one worker creating them all."""
    pairs = [(webhook_ids[i % len(webhook_ids)], new_id("evt")) for i in range(EVENTS)]
    bodies = [message(w, e) for w, e in pairs]
    by_worker: list[list[dict[str, Any]]] = []
    for _ in range(WORKERS):
        copies = rng.sample(bodies, len(bodies))
        by_worker.append([sqs_event(copies[i:i + BATCH]) for i in range(0, len(copies), BATCH)])
    return [delivery_id_for(w, e) for w, e in pairs], by_worker


def _env(db: str, store_url: str) -> dict[str, str]:
    # A slow answer would leave its delivery to a retry worker, which these runs do
    # not have: eight replicas of ten requests each can keep the receiver's answers
    # waiting on a loaded machine, so the read timeout is generous.
    return webhook_env(db, store_url, WEBHOOK_QUEUE=new_id("webhook-retries"), WEBHOOK_READ_TIMEOUT_SECONDS="20")


def test_dispatch_replicas_post_each_delivery_exactly_once(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver, tmp_path: Path
) -> None:
    secrets_ = [new_secret(), new_secret()]
    webhook_ids = [create_subscription(webhook_db, receiver.endpoint(new_id("ep"), s), s) for s in secrets_]
    expected, by_worker = _feed(webhook_ids, random.Random(3))
    events = run_workers(dispatch_worker, WORKERS, tmp_path / "dispatch", _env(webhook_db, store_url), by_worker,
                         won=lambda batch: "attempted" in batch["kinds"])

    first_receives = [e for e in events if e["receive"] == 1]
    assert sum(len(e["records"]) for e in first_receives) == EVENTS * WORKERS  # every batch was handled
    # A record may fail only because a store was unavailable (this machine is
    # shared and loaded); it came back, as from SQS, and was handled then.
    kinds = Counter(kind for e in events for kind in e["kinds"])
    assert all(k.startswith("unavailable ") for k in kinds if k not in ("attempted", "duplicate", "rearmed")), kinds
    assert sum(len(e["failures"]) for e in events) == sum(len(e["records"]) for e in events if e["receive"] > 1)
    # One creator per delivery; every other copy found it (rearmed: still mid-attempt).
    assert kinds["attempted"] == EVENTS and kinds["duplicate"] + kinds["rearmed"] == EVENTS * (WORKERS - 1), kinds
    history = receiver.history()
    assert all(r.verified for r in history)
    assert receiver.successes() == dict.fromkeys(expected, 1)  # none lost, none twice
    assert Counter(r.webhook_id for r in history) == dict.fromkeys(expected, 1)  # no request beyond those
    rows = deliveries(webhook_db, expected)
    assert {(r["status"], r["attempts"]) for r in rows.values()} == {("succeeded", 1)} and len(rows) == EVENTS
    log = attempts(webhook_db, expected)
    assert Counter(a["delivery_id"] for a in log) == dict.fromkeys(expected, 1)
    assert {(a["fence_token"], a["recorded"]) for a in log} == {(0, True)}


def test_retry_replicas_attempt_each_due_delivery_once(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver, tmp_path: Path
) -> None:
    """Every delivery's first attempt fails; 8 retry workers then drain the due
    queue concurrently. Each delivery gets exactly one more POST."""
    secret = new_secret()
    webhook_id = create_subscription(webhook_db, receiver.endpoint(new_id("ep"), secret, Behaviour(fail_first=1)),
                                     secret)
    event_ids = [new_id("evt") for _ in range(40)]
    expected = [delivery_id_for(webhook_id, e) for e in event_ids]
    env = _env(webhook_db, store_url)
    with lambda_env(env) as (dispatch, _):
        for i in range(0, len(event_ids), BATCH):
            bodies = [message(webhook_id, e) for e in event_ids[i:i + BATCH]]
            assert dispatch(sqs_event(bodies), context("dispatch")) == {"batchItemFailures": []}
    assert {r["status"] for r in deliveries(webhook_db, expected).values()} == {"retrying"}

    summaries = run_workers(retry_worker, WORKERS, tmp_path / "retry", env, won=lambda s: s["claimed"] > 0)

    assert sum(s["claimed"] for s in summaries) == len(expected)  # each due item claimed once
    assert sum(s["succeeded"] for s in summaries) == len(expected)
    assert sum(s["fenced_writes_refused"] + s["claims_contended"] for s in summaries) == 0
    assert receiver.successes() == dict.fromkeys(expected, 1)
    assert Counter(r.webhook_id for r in receiver.history()) == dict.fromkeys(expected, 2)
    assert all(r.verified for r in receiver.history())
    rows = deliveries(webhook_db, expected)
    assert {(r["status"], r["attempts"]) for r in rows.values()} == {("succeeded", 2)}
    log = attempts(webhook_db, expected)
    assert all(a["recorded"] for a in log) and len(log) == 2 * len(expected)
    retried_by = Counter(a["delivery_id"] for a in log if a["fence_token"] > 0)
    assert retried_by == dict.fromkeys(expected, 1)
    assert json.dumps(summaries)  # the summaries are plain data (what the handler returns)
