"""An SQS batch records its outcomes together, after its last request
(phase 3, docs/webhooks.md): so no request of the batch may run past the
earliest safety net of the batch, or a retry worker would claim a delivery
whose request went out but whose outcome is not recorded yet, and POST it
again. The records phase 1 left to start at their turn (too little
invocation time to be sure of them) get their own safety nets later, but
their requests too must end inside the batch's first one.

Setting: WEBHOOK_ATTEMPT_LEASE_SECONDS (3 s) shorter than the invocation (10 s after
the margin), one request at a time, 16 records of 0.4 s: the last six are
started at their turn."""

from __future__ import annotations

import psycopg
import pytest

import onceonly
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_cli.testing.receiver import Behaviour, WebhookReceiver
from tests.support.delivery.webhooks import (
    context,
    deliveries,
    drive_retries,
    lambda_env,
    message,
    new_id,
    sqs_event,
    subscribe,
    webhook_env,
)

LEASE = 3.0
RECORDS = 16


@pytest.fixture(params=["postgres", "redis"])
def store_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_url"))


def test_every_outcome_of_a_batch_is_recorded_before_its_first_safety_net_is_due(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver,
) -> None:
    webhook_id = subscribe(webhook_db, receiver, Behaviour(latency=0.4))
    events = [new_id("evt") for _ in range(RECORDS)]
    ids = [delivery_id_for(webhook_id, e) for e in events]
    env = webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=new_id("webhook-retries"),
                      WEBHOOK_ATTEMPT_TIMEOUT_SECONDS="1",
                      WEBHOOK_ATTEMPT_LEASE_SECONDS=str(LEASE), WEBHOOK_MAX_IN_FLIGHT="1", WEBHOOK_CLAIM_BATCH="1",
                      WEBHOOK_DEADLINE_MARGIN_SECONDS="5")
    with lambda_env(env) as (dispatch, retry):
        answer = dispatch(sqs_event([message(webhook_id, e) for e in events]), context("dispatch", 15))
        assert answer == {"batchItemFailures": []}
        with psycopg.connect(webhook_db) as conn:
            first_net = conn.execute(
                "SELECT min(created_at) FROM webhook_deliveries WHERE id = ANY(%s)", (ids,)).fetchone()[0]
            late = conn.execute(
                "SELECT max(finished_at) FROM webhook_attempts WHERE delivery_id = ANY(%s)", (ids,)).fetchone()[0]
        # The batch's first safety net came due LEASE after the first INSERT;
        # every outcome of the invocation was recorded before.
        assert (late - first_net).total_seconds() < LEASE, (first_net, late)
        sent_by_dispatch = sum(receiver.counts().values())
        assert 0 < sent_by_dispatch < RECORDS  # the lease, not the invocation, cut the batch short
        drive_retries(retry, lambda: len(receiver.successes()) == RECORDS)
    assert receiver.counts() == dict.fromkeys(ids, 1)
    assert {row["status"] for row in deliveries(webhook_db, ids).values()} == {"succeeded"}
