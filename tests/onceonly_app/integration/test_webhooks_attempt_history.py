"""The attempt history (`onceonly subscriptions attempts`), against the real
dispatch and retry handlers and a receiver on 127.0.0.1: each attempt's time,
outcome, response code, latency and error, newest first, per delivery or for
the whole subscription, bounded by the limit and the retention."""

from __future__ import annotations

import json

import psycopg
import pytest

from onceonly_app.webhooks.attempts import UnknownDeliveryError, attempt_history
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.subscriptions import UnknownSubscriptionError
from onceonly_cli.testing.receiver import Reply, WebhookReceiver
from tests.support.cli.cli_support import one_line_error, run_cli
from tests.support.delivery.subscription_fixtures import add_subscription
from tests.support.delivery.webhooks import context, deliveries, drive_retries, lambda_env, message, new_id, sqs_event


def test_attempts_list_each_attempt_with_code_latency_and_error_newest_first(
        pg_env: dict[str, str], webhook_db: str, conn: psycopg.Connection, tenant: str,
        receiver: WebhookReceiver) -> None:
    webhook_id, _ = add_subscription(conn, tenant, receiver)
    slow, other = new_id("evt"), new_id("evt")
    slow_id, other_id = delivery_id_for(webhook_id, slow), delivery_id_for(webhook_id, other)
    receiver.script(slow_id, [Reply(503, body=b"down for maintenance"), Reply(200, delay=0.3)])
    with lambda_env(pg_env) as (dispatch, retry):
        dispatch(sqs_event([message(webhook_id, slow, tenant_id=tenant)]), context("dispatch"))
        drive_retries(retry, lambda: deliveries(webhook_db, [slow_id])[slow_id]["status"] == "succeeded")
        dispatch(sqs_event([message(webhook_id, other, tenant_id=tenant)]), context("dispatch"))

    mine = attempt_history(conn, webhook_id, delivery_id=slow_id)
    assert [(a["attempt"], a["outcome"], a["response_code"]) for a in mine] == [(2, "succeeded", 200),
                                                                                 (1, "failed", 503)]
    assert "down for maintenance" in mine[1]["error"] and mine[0]["error"] is None
    assert mine[0]["latency_ms"] >= 300  # the receiver took 0.3 s to answer
    assert mine[0]["started_at"] > mine[1]["started_at"]
    everything = attempt_history(conn, webhook_id)
    assert [a["delivery_id"] for a in everything] == [other_id, slow_id, slow_id]
    assert [a["delivery_id"] for a in attempt_history(conn, webhook_id, limit=1)] == [other_id]
    # Bounded by the retention: an attempt older than it is not listed.
    conn.execute("UPDATE webhook_attempts SET started_at = started_at - interval '8 days', "
                 "finished_at = finished_at - interval '8 days' WHERE delivery_id = %s", (other_id,))
    assert [a["delivery_id"] for a in attempt_history(conn, webhook_id)] == [slow_id, slow_id]

    done = run_cli("subscriptions", "attempts", webhook_id, "--delivery", slow_id, "--json",
                   "--database", webhook_db)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)["attempts"]
    assert [(a["outcome"], a["response_code"]) for a in shown] == [("succeeded", 200), ("failed", 503)]
    done = run_cli("subscriptions", "attempts", webhook_id, "--database", webhook_db)
    assert done.returncode == 0 and f"attempts of {webhook_id}: 2 (newest first)" in done.stdout, done.stderr


def test_an_unknown_subscription_or_delivery_is_a_clear_error(
        webhook_db: str, conn: psycopg.Connection, tenant: str, receiver: WebhookReceiver) -> None:
    webhook_id, _ = add_subscription(conn, tenant, receiver)
    with pytest.raises(UnknownSubscriptionError):
        attempt_history(conn, new_id("no-such"))
    with pytest.raises(UnknownDeliveryError):
        attempt_history(conn, webhook_id, delivery_id="msg_nothing")
    with pytest.raises(ValueError, match="limit"):
        attempt_history(conn, webhook_id, limit=0)
    done = run_cli("subscriptions", "attempts", webhook_id, "--delivery", "msg_nothing", "--database", webhook_db)
    assert "has no delivery 'msg_nothing'" in one_line_error(done)
