"""Subscriptions that are disabled, enabled again, re-pointed or deleted, with the
real dispatch and retry handlers on a real PostgreSQL (docs/webhooks.md,
"Disabled and deleted subscriptions"): no event is lost while a subscription is
disabled, a 410 only disables the URL that answered it, and a deleted
subscription's deliveries end dropped, not failed."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import psycopg
import pytest

import onceonly
from onceonly_app.db.migrate import migrate
from onceonly_app.events import outbox
from onceonly_app.webhooks import subscriptions
from onceonly_app.webhooks.deliveries import SQL, delivery_id_for
from onceonly_app.webhooks.signing import new_secret
from onceonly_cli.local.lambda_runtime import Handler
from onceonly_cli.testing.receiver import Behaviour, Reply, WebhookReceiver
from tests.support.cli.cli_support import one_line_error, run_cli
from tests.support.delivery.webhook_fixtures import migrated_before
from tests.support.delivery.webhooks import (
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
)
from tests.support.functions.events import scheduled_event


@pytest.fixture
def conn(webhook_db: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(webhook_db, autocommit=True) as connection:
        yield connection


def _first_requests(receiver: WebhookReceiver, ids: list[str]) -> list[str]:
    """The delivery ids in the order the receiver first saw each."""
    seen: list[str] = []
    for request in sorted(receiver.history(), key=lambda r: r.received_at):
        if request.webhook_id in ids and request.webhook_id not in seen:
            seen.append(request.webhook_id)
    return seen


def test_events_for_a_disabled_subscription_are_held_then_delivered_in_order_on_enable(
    env: dict[str, str], webhook_db: str, store: onceonly.Store, queue_name: str, receiver: WebhookReceiver,
    conn: psycopg.Connection, store_url: str,
) -> None:
    # The release's order shows on the wire when one worker sends one record at
    # a time (by default a claimed batch's records go concurrently: docs/webhooks.md "Ordering").
    env = {**env, "WEBHOOK_MAX_IN_FLIGHT": "1"}
    webhook_id = subscribe(webhook_db, receiver)
    events = [new_id("evt") for _ in range(5)]
    ids = [delivery_id_for(webhook_id, e) for e in events]
    receiver.script(ids[0], [Reply(410)])  # the endpoint's 410 disables the subscription
    with lambda_env(env) as (dispatch, retry):
        for n, event_id in enumerate(events):
            body = json.loads(message(webhook_id, event_id))
            body["sequence"] = n + 1
            assert dispatch(sqs_event([json.dumps(body)]), context("dispatch")) == {"batchItemFailures": []}
        assert subscription(webhook_db, webhook_id)["enabled"] is False
        rows = deliveries(webhook_db, ids)
        assert [rows[i]["status"] for i in ids] == ["held"] * 5  # kept, the 410's own event too
        assert receiver.counts() == {ids[0]: 1}  # nothing was sent while disabled
        assert store.queue(queue_name).depth().total == 0  # held: no queue item, nothing to claim
        assert retry(scheduled_event("webhook_retry"), context("retry", 20))["claimed"] == 0  # nothing to attempt
        assert receiver.counts() == {ids[0]: 1}

        released = subscriptions.enable(conn, store.queue(queue_name), webhook_id)
        assert (released.released, released.expired) == (ids, [])
        drive_retries(retry, lambda: all(receiver.successes()[i] == 1 for i in ids))
    if not store_url.startswith("dynamodb"):
        # Released in event order; PostgreSQL and Redis hand due items out oldest
        # first (DynamoDB's sharded queue walks its shards from a random one).
        assert _first_requests(receiver, ids) == ids  # the 410's event again first, then in event order
    rows = deliveries(webhook_db, ids)
    assert {rows[i]["status"] for i in ids} == {"succeeded"}
    assert {rows[i]["generation"] for i in ids} == {1}  # released as a redrive would: claims from before fenced
    assert [a["outcome"] for a in attempts(webhook_db, [ids[1]])] == ["disabled", "succeeded"]


def test_a_retrying_delivery_is_held_at_its_next_attempt_not_dead_lettered(
    env: dict[str, str], webhook_db: str, store: onceonly.Store, queue_name: str, receiver: WebhookReceiver,
    conn: psycopg.Connection,
) -> None:
    webhook_id = subscribe(webhook_db, receiver, Behaviour(fail_first=1))
    event_id = new_id("evt")
    delivery_id = delivery_id_for(webhook_id, event_id)
    with lambda_env(env) as (dispatch, retry):
        dispatch(sqs_event([message(webhook_id, event_id)]), context("dispatch"))
        assert deliveries(webhook_db, [delivery_id])[delivery_id]["status"] == "retrying"
        assert subscriptions.disable(conn, webhook_id, "maintenance") is True
        drive_retries(retry, lambda: deliveries(webhook_db, [delivery_id])[delivery_id]["status"] != "retrying")
        assert deliveries(webhook_db, [delivery_id])[delivery_id]["status"] == "held"
        assert store.queue(queue_name).depth().total == 0  # the claim was acked
        assert receiver.counts()[delivery_id] == 1
        subscriptions.enable(conn, store.queue(queue_name), webhook_id)
        drive_retries(retry, lambda: receiver.successes()[delivery_id] == 1)
    assert subscription(webhook_db, webhook_id)["disabled_reason"] is None


def test_the_fan_out_keeps_events_for_a_disabled_subscription_and_none_for_a_deleted_one(
    webhook_db: str, receiver: WebhookReceiver, conn: psycopg.Connection,
) -> None:
    tenant = new_id("tenant-holds")
    secret = new_secret()
    disabled, deleted = (create_subscription(webhook_db, receiver.endpoint(new_id("ep"), secret), secret,
                                             tenant_id=tenant) for _ in range(2))
    subscriptions.disable(conn, disabled, "maintenance")
    subscriptions.delete(conn, deleted)
    event_id = new_id("evt")
    with conn.transaction():
        outbox.fan_out(conn, event_id, "invoice.paid", tenant, {"invoice_id": "inv_1"})
    queued = [r[0] for r in conn.execute("SELECT webhook_id FROM webhook_outbox WHERE event_id = %s", (event_id,))]
    assert queued == [disabled]


def test_held_events_older_than_the_retention_expire_instead_of_being_sent(
    env: dict[str, str], webhook_db: str, store: onceonly.Store, queue_name: str, receiver: WebhookReceiver,
    conn: psycopg.Connection,
) -> None:
    webhook_id = subscribe(webhook_db, receiver)
    subscriptions.disable(conn, webhook_id, "maintenance")
    old, recent = new_id("evt"), new_id("evt")
    old_id, recent_id = delivery_id_for(webhook_id, old), delivery_id_for(webhook_id, recent)
    with lambda_env(env) as (dispatch, retry):
        for event_id, age in ((old, timedelta(days=8)), (recent, timedelta(hours=1))):
            body = json.loads(message(webhook_id, event_id))
            body["occurred_at"] = (datetime.now(UTC) - age).isoformat()
            dispatch(sqs_event([json.dumps(body)]), context("dispatch"))
        done = subscriptions.enable(conn, store.queue(queue_name), webhook_id)
        assert (done.released, done.expired) == ([recent_id], [old_id])
        drive_retries(retry, lambda: receiver.successes()[recent_id] == 1)
    rows = deliveries(webhook_db, [old_id, recent_id])
    assert rows[old_id]["status"] == "expired" and "retention" in rows[old_id]["last_error"]
    assert receiver.counts()[old_id] == 0


def test_a_hold_racing_an_enable_is_released_not_held_forever(
    env: dict[str, str], webhook_db: str, store: onceonly.Store, queue_name: str, receiver: WebhookReceiver,
    conn: psycopg.Connection,
) -> None:
    """The attempt reads the subscription disabled, then an enable commits before
    the attempt records the hold. The hold must see the enable (it waits for the
    subscription's lock), or the delivery is held under an enabled subscription
    and nothing ever releases it."""
    webhook_id = subscribe(webhook_db, receiver)
    subscriptions.disable(conn, webhook_id, "maintenance")
    event_id = new_id("evt")
    delivery_id = delivery_id_for(webhook_id, event_id)
    with lambda_env(env) as (dispatch, retry), psycopg.connect(webhook_db) as enabler:
        # enable()'s statements, in its order, with its transaction kept open in the middle.
        params = {"webhook_id": webhook_id, "enabled": True, "reason": None}
        enabler.execute(subscriptions.SQL["lock_subscription"], params)
        enabler.execute(subscriptions.SQL["set_enabled"], params)
        thread = threading.Thread(target=dispatch, args=(sqs_event([message(webhook_id, event_id)]),
                                                         context("dispatch")))
        thread.start()
        try:
            waited = _wait_for_lock_waiter(conn, timeout=10)
            # release_held cannot see a hold that has not committed: it releases nothing here.
            released = enabler.execute(subscriptions.SQL["release_held"], params).fetchall()
        finally:
            enabler.commit()
            thread.join(30)
        assert waited, "the hold did not wait for the enable's lock"
        assert released == []
        drive_retries(retry, lambda: receiver.successes()[delivery_id] == 1)
    assert deliveries(webhook_db, [delivery_id])[delivery_id]["status"] == "succeeded"


def _wait_for_lock_waiter(conn: psycopg.Connection, timeout: float) -> bool:
    """Whether record_held is waiting for a lock (polls pg_stat_activity, the only
    way to see a blocked statement from outside; its query text is cut at 1 kB,
    so the statement is recognised by its opening)."""
    opening = SQL["record_held"][:60]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                           "AND datname = current_database() AND starts_with(query, %s)",
                           (opening,)).fetchone()
        if row and row[0]:
            return True
        time.sleep(0.05)
    return False


@contextmanager
def _in_flight(dispatch: Handler, receiver: WebhookReceiver, webhook_id: str, event_id: str,
               status: int) -> Iterator[None]:
    """Dispatch the event in a thread; the block runs while its first request is
    on the wire, and the endpoint answers ``status`` when the block ends."""
    answer = threading.Event()
    delivery_id = delivery_id_for(webhook_id, event_id)
    receiver.script(delivery_id, [Reply(status, hold=answer)])
    thread = threading.Thread(target=dispatch, args=(sqs_event([message(webhook_id, event_id)]),
                                                     context("dispatch")))
    thread.start()
    try:
        # A loaded machine's first invocation (service build, pools) took over 10 s once.
        assert receiver.wait_for(lambda requests: any(r.webhook_id == delivery_id for r in requests), 30), \
            "the dispatcher's request never reached the receiver"
        yield
    finally:
        answer.set()
        thread.join(30)


def test_a_410_from_the_old_url_does_not_disable_the_new_one(
    env: dict[str, str], webhook_db: str, receiver: WebhookReceiver, conn: psycopg.Connection,
) -> None:
    secret = new_secret()
    old_url = receiver.endpoint(new_id("v1"), secret)
    new_url = receiver.endpoint(new_id("v2"), secret)
    webhook_id = create_subscription(webhook_db, old_url, secret)
    event_id = new_id("evt")
    delivery_id = delivery_id_for(webhook_id, event_id)
    with lambda_env(env) as (dispatch, retry):
        with _in_flight(dispatch, receiver, webhook_id, event_id, 410):  # v1 answers 410 after the change
            conn.execute("UPDATE webhook_subscriptions SET url = %s WHERE id = %s", (new_url, webhook_id))
        sub = subscription(webhook_db, webhook_id)
        assert (sub["enabled"], sub["disabled_reason"]) == (True, None)
        assert deliveries(webhook_db, [delivery_id])[delivery_id]["status"] == "retrying"
        drive_retries(retry, lambda: receiver.successes()[delivery_id] == 1)
    endpoints = [r.endpoint for r in receiver.history(delivery_id)]
    assert endpoints == [old_url.rsplit("/", 1)[1], new_url.rsplit("/", 1)[1]]
    assert [a["outcome"] for a in attempts(webhook_db, [delivery_id])] == ["gone", "succeeded"]


def test_a_410_from_the_current_url_still_disables(
    env: dict[str, str], webhook_db: str, receiver: WebhookReceiver,
) -> None:
    webhook_id = subscribe(webhook_db, receiver, Behaviour(failure_rate=1.0, failure_status=410))
    with lambda_env(env) as (dispatch, _):
        dispatch(sqs_event([message(webhook_id, new_id("evt"))]), context("dispatch"))
    sub = subscription(webhook_db, webhook_id)
    assert (sub["enabled"], sub["disabled_reason"]) == (False, "410 Gone from the endpoint")


def test_deleting_a_subscription_with_history_drops_its_queued_deliveries_not_fails_them(
    env: dict[str, str], webhook_db: str, store: onceonly.Store, queue_name: str, receiver: WebhookReceiver,
    conn: psycopg.Connection,
) -> None:
    webhook_id = subscribe(webhook_db, receiver)
    delivered, queued, late = new_id("evt"), new_id("evt"), new_id("evt")
    ids = [delivery_id_for(webhook_id, e) for e in (delivered, queued, late)]
    receiver.script(ids[1], [Reply(500)])
    with lambda_env(env) as (dispatch, retry):
        dispatch(sqs_event([message(webhook_id, delivered), message(webhook_id, queued)]), context("dispatch"))
        assert [deliveries(webhook_db, ids[:2])[i]["status"] for i in ids[:2]] == ["succeeded", "retrying"]

        assert subscriptions.delete(conn, webhook_id) == [ids[1]]  # history kept: no foreign key refusal
        # A message still on its way for the deleted subscription is acked, not failed towards the DLQ.
        assert dispatch(sqs_event([message(webhook_id, late)]), context("dispatch")) == {"batchItemFailures": []}
        summaries = drive_retries(retry, lambda: store.queue(queue_name).depth().total == 0)
    rows = deliveries(webhook_db, ids)
    assert [rows[i]["status"] for i in ids] == ["succeeded", "dropped", "dropped"]
    assert receiver.counts() == {ids[0]: 1, ids[1]: 1}  # nothing sent after the delete
    assert sum(s.get("dead", 0) + s.get("claims_failed", 0) for s in summaries) == 0
    sub = subscription(webhook_db, webhook_id)
    assert sub["deleted_at"] is not None and sub["enabled"] is False
    with pytest.raises(subscriptions.SubscriptionDeletedError):
        subscriptions.enable(conn, store.queue(queue_name), webhook_id)
    with pytest.raises(subscriptions.SubscriptionDeletedError):
        subscriptions.delete(conn, webhook_id)


def test_a_delete_while_a_request_is_in_flight_ends_it_dropped(
    env: dict[str, str], webhook_db: str, store: onceonly.Store, queue_name: str, receiver: WebhookReceiver,
    conn: psycopg.Connection,
) -> None:
    webhook_id = subscribe(webhook_db, receiver)
    event_id = new_id("evt")
    delivery_id = delivery_id_for(webhook_id, event_id)
    # The dispatcher cannot record its outcome on a dropped delivery: its safety
    # net comes due when the attempt's lease ends, shortened here from 30 s.
    short_lease = {**env, "WEBHOOK_CONNECT_TIMEOUT_SECONDS": "1", "WEBHOOK_READ_TIMEOUT_SECONDS": "4",
                   "WEBHOOK_ATTEMPT_LEASE_SECONDS": "6"}
    with lambda_env(short_lease) as (dispatch, retry):
        with _in_flight(dispatch, receiver, webhook_id, event_id, 500):
            assert subscriptions.delete(conn, webhook_id) == [delivery_id]
        drive_retries(retry, lambda: store.queue(queue_name).depth().total == 0, timeout=60)
    assert deliveries(webhook_db, [delivery_id])[delivery_id]["status"] == "dropped"
    assert [(a["outcome"], a["recorded"]) for a in attempts(webhook_db, [delivery_id])] == [("failed", False)]
    assert receiver.counts()[delivery_id] == 1


def test_bad_input_is_refused_and_changes_nothing(webhook_db: str, conn: psycopg.Connection,
                                                  store: onceonly.Store) -> None:
    webhook_id = create_subscription(webhook_db, "https://hooks.example.com/x", new_secret())
    with pytest.raises(subscriptions.UnknownSubscriptionError):
        subscriptions.disable(conn, new_id("no-such"), "why")
    for reason in ("", "   ", "x" * 201):
        with pytest.raises(ValueError, match="reason"):
            subscriptions.disable(conn, webhook_id, reason)
    with pytest.raises(ValueError, match="retention"):
        subscriptions.enable(conn, store.queue(new_id("q")), webhook_id, retention=0)
    with psycopg.connect(webhook_db) as in_transaction, pytest.raises(ValueError, match="autocommit"):
        subscriptions.enable(in_transaction, store.queue(new_id("q")), webhook_id)
    assert subscription(webhook_db, webhook_id)["enabled"] is True


def test_the_subscriptions_command_disables_enables_and_deletes(webhook_db: str, receiver: WebhookReceiver) -> None:
    webhook_id = subscribe(webhook_db, receiver)
    disabled = run_cli("subscriptions", "disable", webhook_id, "--reason", "moving hosts", "--database", webhook_db)
    assert disabled.returncode == 0, disabled.stderr
    sub = subscription(webhook_db, webhook_id)
    assert (sub["enabled"], sub["disabled_reason"]) == (False, "moving hosts")
    # enable queues the held deliveries: a store of the test's own, set up (not the user's default)
    with closing(onceonly.connect(webhook_db)) as own_store:
        own_store.setup()
    enabled = run_cli("subscriptions", "enable", webhook_id, "--database", webhook_db, "--store", webhook_db)
    assert enabled.returncode == 0 and "0 held deliveries queued" in enabled.stdout, enabled.stderr
    assert subscription(webhook_db, webhook_id)["enabled"] is True
    deleted = run_cli("subscriptions", "delete", webhook_id, "--database", webhook_db)
    assert deleted.returncode == 0, deleted.stderr
    assert subscription(webhook_db, webhook_id)["deleted_at"] is not None
    again = run_cli("subscriptions", "enable", webhook_id, "--database", webhook_db, "--store", webhook_db)
    assert again.returncode == 1 and "was deleted" in one_line_error(again)
    unknown = run_cli("subscriptions", "delete", new_id("no-such"), "--database", webhook_db)
    assert unknown.returncode == 1 and "unknown subscription" in one_line_error(unknown)


def test_the_0007_upgrade_holds_what_the_old_code_dead_lettered_for_a_disabled_subscription(
        postgres_server_url: str, store: onceonly.Store) -> None:
    with migrated_before(postgres_server_url, "0007") as url, psycopg.connect(url, autocommit=True) as conn:
        for webhook_id, enabled in (("wh-off", False), ("wh-on", True)):
            conn.execute("INSERT INTO webhook_subscriptions (id, tenant_id, url, secret, enabled) "
                         "VALUES (%s, 't1', 'https://x.test/', 'whsec_x', %s)", (webhook_id, enabled))
        old_rows = [("wh-off", "evt-1", "subscription disabled"), ("wh-off", "evt-2", "500 Internal Server Error"),
                    ("wh-on", "evt-3", "subscription disabled")]
        for webhook_id, event_id, error in old_rows:
            conn.execute("INSERT INTO webhook_deliveries (id, webhook_id, tenant_id, event_id, event_type, payload, "
                         "status, last_error) VALUES (%s, %s, 't1', %s, 'invoice.paid', '{}', 'dead', %s)",
                         (delivery_id_for(webhook_id, event_id), webhook_id, event_id, error))
        assert "0007_webhook_holds.sql" in migrate(url)
        statuses = dict(conn.execute("SELECT event_id, status FROM webhook_deliveries").fetchall())
        # Held: its subscription is still disabled. A real failure stays dead, and so does the one of
        # a subscription enabled since (re-drivable as before).
        assert statuses == {"evt-1": "held", "evt-2": "dead", "evt-3": "dead"}
        released = subscriptions.enable(conn, store.queue(new_id("q")), "wh-off")
        assert released.released == [delivery_id_for("wh-off", "evt-1")]


class _QueueThatDies:
    """A due queue whose first put dies, as a process killed between
    enable()'s commit and its queue put would."""

    def __init__(self, queue: onceonly.Queue) -> None:
        self.queue, self.died = queue, False

    def put_if_absent(self, items: Any) -> list[bool]:
        if not self.died:
            self.died = True
            raise onceonly.StoreUnavailableError("killed before the queue put")
        return self.queue.put_if_absent(items)


def test_enabling_again_queues_what_an_enable_that_died_released(
    env: dict[str, str], webhook_db: str, store: onceonly.Store, queue_name: str, receiver: WebhookReceiver,
    conn: psycopg.Connection,
) -> None:
    webhook_id = subscribe(webhook_db, receiver)
    subscriptions.disable(conn, webhook_id, "maintenance")
    event_id = new_id("evt")
    delivery_id = delivery_id_for(webhook_id, event_id)
    dying = _QueueThatDies(store.queue(queue_name))
    with lambda_env(env) as (dispatch, retry):
        dispatch(sqs_event([message(webhook_id, event_id)]), context("dispatch"))
        with pytest.raises(onceonly.StoreUnavailableError):
            subscriptions.enable(conn, cast(onceonly.Queue, dying), webhook_id)
        assert deliveries(webhook_db, [delivery_id])[delivery_id]["status"] == "retrying"  # released, not queued
        assert store.queue(queue_name).depth().total == 0
        again = subscriptions.enable(conn, cast(onceonly.Queue, dying), webhook_id)  # already enabled: re-queues
        assert again.released == [delivery_id]
        drive_retries(retry, lambda: receiver.successes()[delivery_id] == 1)
