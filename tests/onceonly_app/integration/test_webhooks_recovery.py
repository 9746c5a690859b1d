"""Recover and replay (`onceonly subscriptions recover|replay ID --since T`),
against the real dispatch and retry handlers and a receiver on 127.0.0.1:
the window's failed deliveries (dead, expired, aborted) are sent again under
the same webhook-id, once each; a succeeded one never is (replay excepted);
running it twice sends nothing twice. The race with a live retry worker is in
tests/onceonly_app/concurrency/test_webhooks_recover_race.py."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import onceonly
from onceonly_app.webhooks import recovery, subscriptions
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_cli.testing.receiver import Reply, WebhookReceiver
from tests.support.cli.cli_support import one_line_error, run_cli
from tests.support.delivery.subscription_fixtures import add_subscription
from tests.support.delivery.webhooks import context, deliveries, drive_retries, lambda_env, message, new_id, sqs_event
from tests.support.functions.events import scheduled_event

ABORT = (("webhook-delivery", "abort-message"),)


def _statuses(webhook_db: str, ids: list[str]) -> list[str]:
    rows = deliveries(webhook_db, ids)
    return [rows[i]["status"] for i in ids]


def test_recover_sends_the_windows_failed_deliveries_once_each_and_replay_the_succeeded_too(
        pg_env: dict[str, str], webhook_db: str, conn: psycopg.Connection, tenant: str,
        receiver: WebhookReceiver, pg_store: onceonly.Store) -> None:
    env = {**pg_env, "WEBHOOK_RETRY_SCHEDULE_SECONDS": "0.05"}  # two attempts, then dead
    queue = pg_store.queue(env["WEBHOOK_QUEUE"])
    webhook_id, _ = add_subscription(conn, tenant, receiver)
    names = ("dead", "aborted", "expired", "ok", "old")
    events = {name: new_id(f"evt-{name}") for name in names}
    ids = {name: delivery_id_for(webhook_id, event) for name, event in events.items()}
    for name in ("dead", "expired", "old"):
        receiver.script(ids[name], [Reply(500), Reply(500)])
    receiver.script(ids["aborted"], [Reply(400, headers=ABORT)])
    with lambda_env(env) as (dispatch, retry):
        dispatch(sqs_event([message(webhook_id, events[n], tenant_id=tenant) for n in names]), context("dispatch"))
        drive_retries(retry, lambda: _statuses(webhook_db, [ids["dead"], ids["expired"], ids["old"]])
                      == ["dead"] * 3)
    # An event held past the retention ends expired (subscriptions.enable); one from two days ago is out of the window.
    conn.execute("UPDATE webhook_deliveries SET status = 'expired' WHERE id = %s", (ids["expired"],))
    conn.execute("UPDATE webhook_deliveries SET created_at = created_at - interval '2 days' WHERE id = %s",
                 (ids["old"],))
    assert _statuses(webhook_db, list(ids.values())) == ["dead", "aborted", "expired", "succeeded", "dead"]
    before = receiver.counts()
    since = datetime.now(tz=UTC) - timedelta(hours=1)

    first = recovery.recover(conn, queue, webhook_id, since, actor="frank")
    assert sorted(first.previous.items()) == [("aborted", 1), ("dead", 1), ("expired", 1)]
    again = recovery.recover(conn, queue, webhook_id, since)  # run twice: only re-queued, nothing new
    assert sorted(again.delivery_ids) == sorted(first.delivery_ids) and again.newly_sent == 0
    with lambda_env(env) as (_, retry):
        drive_retries(retry, lambda: receiver.successes()[ids["dead"]] == 1
                      and receiver.successes()[ids["expired"]] == 1 and receiver.successes()[ids["aborted"]] == 1)
        retry_summary = retry(scheduled_event("webhook_retry"), context("retry", 20))
    assert retry_summary["claimed"] == 0  # nothing left queued: the second run's items replaced the first's
    sent = receiver.counts() - before
    assert sent == {ids["dead"]: 1, ids["aborted"]: 1, ids["expired"]: 1}  # once each, the others not at all
    assert all(r.webhook_id == ids[n] and r.verified for n in ("dead", "aborted", "expired")
               for r in receiver.history(ids[n])[-1:])
    assert recovery.recover(conn, queue, webhook_id, since).count == 0  # all succeeded: nothing to recover

    replayed = recovery.replay(conn, queue, webhook_id, since, datetime.now(tz=UTC), actor="frank")
    assert replayed.previous == {"succeeded": 4}  # the old one is outside the window
    with lambda_env(env) as (_, retry):
        drive_retries(retry, lambda: all(receiver.successes()[ids[n]] == 2 for n in ("dead", "aborted", "ok")))
    assert receiver.successes()[ids["ok"]] == 2 and receiver.counts()[ids["old"]] == 2  # old: its 2 failures
    audit = [row for row in subscriptions.show(conn, webhook_id)["changes"] if row["action"] in ("recover", "replay")]
    assert [(row["action"], row["detail"]["requeued"]) for row in reversed(audit)] == [
        ("recover", 3), ("recover", 3), ("recover", 0), ("replay", 4)]


def test_bad_windows_and_unknown_subscriptions_are_clear_errors(
        webhook_db: str, conn: psycopg.Connection, tenant: str, receiver: WebhookReceiver,
        pg_store: onceonly.Store, postgres_url: str) -> None:
    webhook_id, _ = add_subscription(conn, tenant, receiver)
    queue = pg_store.queue(new_id("q"))
    with pytest.raises(ValueError, match="since must be before"):
        recovery.recover(conn, queue, webhook_id, time.time() + 60)
    with pytest.raises(ValueError, match="time zone"):
        recovery.recover(conn, queue, webhook_id, datetime(2026, 12, 1, 9, 0))  # noqa: DTZ001 - the point
    with pytest.raises(subscriptions.UnknownSubscriptionError):
        recovery.recover(conn, queue, new_id("no-such"), 0.0)
    base = ("--database", webhook_db, "--store", postgres_url)
    done = run_cli("subscriptions", "recover", webhook_id, "--since", "2026-12-01T09:00:00", *base)
    assert "time zone" in one_line_error(done)
    done = run_cli("subscriptions", "recover", webhook_id, "--since", "yesterday", *base)
    assert "ISO 8601" in one_line_error(done)
    done = run_cli("subscriptions", "replay", webhook_id, "--since", "2026-01-01T00:00:00Z", "--json", *base)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["requeued"] == 0


def test_a_recover_between_the_dispatchers_outcome_and_its_queue_cleanup_is_not_stranded(
        pg_env: dict[str, str], webhook_db: str, conn: psycopg.Connection, tenant: str,
        receiver: WebhookReceiver, pg_store: onceonly.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dispatcher records an abort, then removes the delivery's queue item.
    A recover that commits in between has re-queued the delivery under a new
    generation: the removal must not leave it retrying with no queue item,
    never to be sent."""
    queue = pg_store.queue(pg_env["WEBHOOK_QUEUE"])
    webhook_id, _ = add_subscription(conn, tenant, receiver)
    event = new_id("evt")
    delivery = delivery_id_for(webhook_id, event)
    receiver.script(delivery, [Reply(400, headers=ABORT)])
    since = datetime.now(tz=UTC) - timedelta(hours=1)
    real_cancel_many = type(queue).cancel_many
    recovered: list[str] = []

    def cancel_many_after_a_recover(self: onceonly.Queue, item_ids: list[str]) -> int:
        recovered.extend(recovery.recover(conn, queue, webhook_id, since).delivery_ids)  # the operator, right then
        return real_cancel_many(self, item_ids)

    monkeypatch.setattr(type(queue), "cancel_many", cancel_many_after_a_recover)
    with lambda_env(pg_env) as (dispatch, retry):
        dispatch(sqs_event([message(webhook_id, event, tenant_id=tenant)]), context("dispatch"))
        monkeypatch.undo()
        assert recovered == [delivery]
        drive_retries(retry, lambda: receiver.successes()[delivery] == 1)
    assert _statuses(webhook_db, [delivery]) == ["succeeded"]
    assert receiver.counts()[delivery] == 2  # the abort, then the recovered delivery once
