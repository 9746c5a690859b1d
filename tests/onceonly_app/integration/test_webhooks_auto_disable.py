"""Failing endpoints disabled with notice (docs/webhooks.md, "Failing endpoints"):
a subscription whose attempts have all failed for the period is disabled with a
reason, its new events are held, and endpoint.disabled goes to the tenant's
operational subscriptions and as an e-mail to its contact; a message out of
attempts is announced the same way (message.attempt.exhausted). The five days
pass on a clock the test injects into the service it builds from the real
parts (the deployed tree reads time.time); the real handlers are run with a
period of a second."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

import onceonly
from onceonly_app.billing import notifications
from onceonly_app.billing.config import NotificationSettings
from onceonly_app.billing.ses import SesNotifier
from onceonly_app.runtime.budget import Budget
from onceonly_app.webhooks import subscriptions
from onceonly_app.webhooks.config import WebhookConfig
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.endpoint_health import (
    ENDPOINT_DISABLED,
    MESSAGE_EXHAUSTED,
    EndpointHealth,
    set_contact,
)
from onceonly_app.webhooks.messages import DeliveryRequest
from onceonly_app.webhooks.sender import WebhookSender
from onceonly_app.webhooks.service import WebhookService
from onceonly_cli.testing.receiver import Behaviour, ReceivedRequest, WebhookReceiver
from tests.support.cli.cli_support import run_cli
from tests.support.delivery.subscription_fixtures import add_subscription
from tests.support.delivery.webhooks import (
    context,
    deliveries,
    drive_retries,
    lambda_env,
    message,
    new_id,
    sqs_event,
    subscription,
)
from tests.support.functions.events import scheduled_event
from tests.support.jobs.jobs_helpers import aws_client, sent_emails
from tests.support.jobs.jobs_inprocess import run_tick

DAY = 24 * 3600.0
FAILING = Behaviour(failure_rate=1.0)
OPERATIONAL = [ENDPOINT_DISABLED, MESSAGE_EXHAUSTED]


class Clock:
    """The health bookkeeping's clock: moved by the test, days at a time."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@pytest.fixture
def pool(webhook_db: str) -> Iterator[ConnectionPool]:
    with ConnectionPool(webhook_db, min_size=0, max_size=4, open=True) as p:
        yield p


def _service(pool: ConnectionPool, store: onceonly.Store, queue_name: str, clock: Clock,
             schedule: tuple[float, ...] = (0.05,) * 20) -> WebhookService:
    """The service as runtime.py builds it, with the test's clock for the health bookkeeping."""
    config = WebhookConfig(retry_schedule=schedule, allow_http_hosts=frozenset({"127.0.0.1"}),
                           connect_timeout=2, read_timeout=5, attempt_lease=30, queue_name=queue_name)
    queue = store.queue(queue_name)
    health = EndpointHealth(pool, queue, period=config.auto_disable_after, lease=config.attempt_lease,
                            clock=clock, log=logging.getLogger("test"))
    sender = WebhookSender(config.connect_timeout, config.read_timeout)
    return WebhookService(pool, queue, sender, config, health=health)


def _dispatch(service: WebhookService, webhook_id: str, tenant: str) -> str:
    event_id = new_id("evt")
    service.dispatch(DeliveryRequest(webhook_id, event_id, "invoice.paid", {"n": 1}, tenant))
    return delivery_id_for(webhook_id, event_id)


def _drain(service: WebhookService, until: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "the retries did not get there"
        service.run_retries(Budget.after(20))
        time.sleep(0.06)


def _notices(receiver: WebhookReceiver, endpoint_requests: list[ReceivedRequest]) -> list[dict[str, Any]]:
    return [json.loads(r.body) for r in endpoint_requests if r.verified and r.status == 200]


def _mails(conn: psycopg.Connection, tenant: str) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT kind, recipient, subject, body_text, status FROM notifications "
                           "WHERE tenant_id = %s ORDER BY id", (tenant,)).fetchall()


def test_a_subscription_failing_for_five_days_is_disabled_with_notice_and_its_events_are_held(
        webhook_db: str, conn: psycopg.Connection, tenant: str, pool: ConnectionPool, pg_store: onceonly.Store,
        receiver: WebhookReceiver, moto_endpoint: str, ses_sender: str) -> None:
    clock = Clock()
    service = _service(pool, pg_store, new_id("q"), clock)
    failing, _ = add_subscription(conn, tenant, receiver, FAILING)
    ops_id, _ = add_subscription(conn, tenant, receiver, event_types=OPERATIONAL)
    contact = f"ops@{tenant}.test"
    assert set_contact(conn, tenant, contact)
    ops_endpoint = subscriptions.show(conn, ops_id)["url"].rsplit("/", 1)[1]

    first = _dispatch(service, failing, tenant)  # fails: the failing period starts now
    since = subscription(webhook_db, failing)["failing_since"]
    assert since is not None
    clock.offset = 4 * DAY
    _dispatch(service, failing, tenant)  # four days on, still failing: not yet
    assert subscription(webhook_db, failing)["enabled"] is True
    assert subscription(webhook_db, failing)["failing_since"] == since  # counted from the first failure
    clock.offset = 5 * DAY + 60
    result = service.dispatch(DeliveryRequest(failing, new_id("evt"), "invoice.paid", {"n": 3}, tenant))
    assert result.attempt is not None and result.attempt.auto_disabled

    row = subscription(webhook_db, failing)
    assert row["enabled"] is False and row["disabled_reason"].startswith("disabled automatically")
    audit = [c for c in subscriptions.show(conn, failing)["changes"] if c["action"] == "disable"]
    assert [(c["actor"], c["detail"]["automatic"]) for c in audit] == [("auto-disable", True)]
    # Its new events are held; the earlier ones are held at their next attempt.
    held = _dispatch(service, failing, tenant)
    _drain(service, lambda: deliveries(webhook_db, [held, first])[first]["status"] == "held")
    assert deliveries(webhook_db, [held])[held]["status"] == "held"
    # The notice reaches the operational subscription, signed, once.
    _drain(service, lambda: _notices(receiver, [r for r in receiver.history() if r.endpoint == ops_endpoint]))
    (notice,) = _notices(receiver, [r for r in receiver.history() if r.endpoint == ops_endpoint])
    assert notice["type"] == ENDPOINT_DISABLED and notice["data"]["subscription_id"] == failing
    assert notice["data"]["trigger"] == "automatic"
    (mail,) = _mails(conn, tenant)
    assert (mail["kind"], mail["recipient"], mail["status"]) == (ENDPOINT_DISABLED, contact, "pending")
    assert failing in mail["subject"] and "enable" in mail["body_text"]
    # The notifications job sends it through SES (moto), as any other e-mail of the outbox.
    ses = SesNotifier(aws_client("ses", moto_endpoint), ses_sender)
    settings = NotificationSettings(sender=ses_sender, claim_ttl=30.0, max_attempts=3, batch_size=10,
                                    retry_schedule=(60.0,))
    sent = run_tick(pg_store, new_id("notifications"), "2026-12-02T10:05:00Z",
                    lambda tick: notifications.run(pool, tick, ses, settings, tenant=tenant))["result"]
    assert sent.sent == 1 and _mails(conn, tenant)[0]["status"] == "sent"
    (email,) = sent_emails(f"@{tenant}.test")
    assert email.destinations["ToAddresses"] == [contact] and failing in email.subject
    # Nothing is sent twice: a later failure of the (now disabled) subscription disables and announces nothing.
    service.health.failed(failing, since.timestamp())  # type: ignore[union-attr]
    assert len(_mails(conn, tenant)) == 1 and [c["action"] for c in subscriptions.show(conn, failing)["changes"]
                                               ].count("disable") == 1


def test_a_success_restarts_the_failing_period(
        webhook_db: str, conn: psycopg.Connection, tenant: str, pool: ConnectionPool, pg_store: onceonly.Store,
        receiver: WebhookReceiver) -> None:
    clock = Clock()
    service = _service(pool, pg_store, new_id("q"), clock)
    flaky = Behaviour()
    webhook_id, _ = add_subscription(conn, tenant, receiver, flaky)
    flaky.failure_rate = 1.0
    _dispatch(service, webhook_id, tenant)
    clock.offset = 3 * DAY
    flaky.failure_rate = 0.0
    _dispatch(service, webhook_id, tenant)  # a success three days in
    assert subscription(webhook_db, webhook_id)["failing_since"] is None
    flaky.failure_rate = 1.0
    clock.offset = 4 * DAY
    _dispatch(service, webhook_id, tenant)  # failing again: the period starts over here
    clock.offset = 6 * DAY  # six days after the first failure, two after the last success
    result = service.dispatch(DeliveryRequest(webhook_id, new_id("evt"), "invoice.paid", {}, tenant))
    assert result.attempt is not None and not result.attempt.auto_disabled
    assert subscription(webhook_db, webhook_id)["enabled"] is True


def test_a_message_out_of_attempts_is_announced_once_and_a_notice_never_announces_itself(
        webhook_db: str, conn: psycopg.Connection, tenant: str, pool: ConnectionPool, pg_store: onceonly.Store,
        receiver: WebhookReceiver) -> None:
    service = _service(pool, pg_store, new_id("q"), Clock(), schedule=(0.05,))  # two attempts
    failing, _ = add_subscription(conn, tenant, receiver, FAILING)
    # An operational endpoint that fails too: its own notices run out of attempts, unannounced.
    ops_id, _ = add_subscription(conn, tenant, receiver, FAILING, event_types=[MESSAGE_EXHAUSTED])
    assert set_contact(conn, tenant, f"ops@{tenant}.test")
    delivery_id = _dispatch(service, failing, tenant)
    notice_id = delivery_id_for(ops_id, f"{MESSAGE_EXHAUSTED}:{delivery_id}:0")
    _drain(service, lambda: deliveries(webhook_db, [delivery_id, notice_id]).get(notice_id, {}).get("status")
           == "dead")
    notice = deliveries(webhook_db, [notice_id])[notice_id]
    assert notice["event_type"] == MESSAGE_EXHAUSTED and notice["payload"]["delivery_id"] == delivery_id
    assert notice["payload"]["last_attempt"]["response_code"] == 500
    # The notice's own exhaustion made no notice, and the message's made one e-mail.
    assert conn.execute("SELECT count(*) FROM webhook_deliveries WHERE webhook_id = %s", (ops_id,)).fetchone() == (1,)
    assert [m["kind"] for m in _mails(conn, tenant)] == [MESSAGE_EXHAUSTED]
    again = service.health.exhausted(delivery_id, 0, tenant, failing, "e", "invoice.paid", 500, "x")  # type: ignore[union-attr]
    assert again == [delivery_id_for(ops_id, f"{MESSAGE_EXHAUSTED}:{delivery_id}:0")]
    assert len(_mails(conn, tenant)) == 1 and len(receiver.history(notice_id)) == 2  # nothing new was sent


def test_the_real_handlers_disable_after_the_configured_period(
        pg_env: dict[str, str], webhook_db: str, conn: psycopg.Connection, tenant: str,
        receiver: WebhookReceiver) -> None:
    env = {**pg_env, "WEBHOOK_AUTO_DISABLE_AFTER_SECONDS": "1",
           "WEBHOOK_RETRY_SCHEDULE_SECONDS": "0.3,0.3,0.3,0.3,0.3,0.3"}
    webhook_id, _ = add_subscription(conn, tenant, receiver, FAILING)
    with lambda_env(env) as (dispatch, retry):
        dispatch(sqs_event([message(webhook_id, new_id("evt"), tenant_id=tenant)]), context("dispatch"))
        summaries = drive_retries(retry, lambda: not subscription(webhook_db, webhook_id)["enabled"])
        retry(scheduled_event("webhook_retry"), context("retry", 20))
    assert sum(s["auto_disabled"] for s in summaries) == 1
    assert subscription(webhook_db, webhook_id)["disabled_reason"] == \
        "disabled automatically: every attempt failed for 1 s"
    done = run_cli("subscriptions", "contact", "--tenant", tenant, "--email", "a@b.test", "--database", webhook_db)
    assert done.returncode == 0, done.stderr
    assert conn.execute("SELECT contact_email FROM billing_tenants WHERE tenant_id = %s",
                        (tenant,)).fetchone() == ("a@b.test",)
