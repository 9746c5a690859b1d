"""Tenant isolation of webhooks, on the real PostgreSQL:
each tenant's events, of every type, reach only that tenant's subscriptions,
end to end (producer, outbox, SQS, dispatcher, receiver); a delivery that would
cross tenants is refused without a request; and the upgrade (0004) leaves no
subscription receiving another tenant's events."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

import onceonly
from onceonly_app.billing import payment_watcher
from onceonly_app.billing.assets import AcceptedAssets
from onceonly_app.billing.payments_api import PaymentsClient
from onceonly_app.db.migrate import migrate
from onceonly_app.events import outbox
from onceonly_app.events.types import EVENT_TYPES
from onceonly_app.webhooks import subscriptions
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.signing import new_secret
from onceonly_cli.testing.fake_payments import FakePayments
from onceonly_cli.testing.receiver import WebhookReceiver
from tests.support.delivery.webhook_fixtures import migrated_before
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
from tests.support.jobs import jobs_data as data
from tests.support.jobs.jobs_helpers import aws_client, drain_queue
from tests.support.jobs.jobs_inprocess import run_tick


class Producers:
    """Each event type's real producer, where the app has one (else fan_out itself)."""

    def __init__(self, pool: ConnectionPool, store: onceonly.Store, sqs: Any, queue_url: str) -> None:
        self.pool, self.store, self.sqs, self.queue_url = pool, store, sqs, queue_url

    def emit(self, event_type: str, tenant: str) -> None:
        """One ``event_type`` event of ``tenant``, in its outbox (and maybe sent already)."""
        if event_type == "invoice.paid":
            self.pay_an_invoice(tenant)
            return
        with self.pool.connection() as conn, conn.transaction():
            outbox.fan_out(conn, new_id("evt"), event_type, tenant, {"tenant_id": tenant})

    def pay_an_invoice(self, tenant: str) -> None:
        """The payment watcher pays an invoice of ``tenant``, on its own receiving account."""
        with FakePayments() as fake:
            with self.pool.connection() as conn:
                invoice = data.add_invoice(conn, tenant, due_at="2026-12-01T00:00:00Z", amount_cents=500)
                data.add_receiving_account(conn, tenant, fake.receiver)
            fake.add(memo=invoice, amount="5.00")
            poll = payment_watcher.Poll(PaymentsClient(fake.url), AcceptedAssets.parse(f"USD=USD:{fake.issuer}"),
                                        poller_ttl=30)
            report = run_tick(self.store, f"watch-{tenant}", "2026-11-29T10:00:00Z", lambda tick: payment_watcher.run(
                self.pool, tick, poll, self.sqs, self.queue_url, tenant=tenant))
        assert report["result"].invoices_paid == 1


def test_each_tenant_receives_only_its_own_events_of_every_type(
    jobs_db: str, pool: ConnectionPool, pg_store: onceonly.Store, moto_endpoint: str, sqs_queue: str,
    receiver: WebhookReceiver, unique: str, postgres_url: str,
) -> None:
    tenants = [f"tenant-a-{unique}", f"tenant-b-{unique}"]
    endpoint_of: dict[str, str] = {}
    for tenant in tenants:
        secret = new_secret()
        webhook_id = create_subscription(jobs_db, receiver.endpoint(tenant, secret), secret, tenant_id=tenant)
        endpoint_of[webhook_id] = tenant
    muted = create_subscription(jobs_db, receiver.endpoint("muted", new_secret()), new_secret(),
                                tenant_id=tenants[0])
    with psycopg.connect(jobs_db, autocommit=True) as conn:
        subscriptions.delete(conn, muted)

    sqs = aws_client("sqs", moto_endpoint)
    producers = Producers(pool, pg_store, sqs, sqs_queue)
    for event_type in EVENT_TYPES:
        for tenant in tenants:
            producers.emit(event_type, tenant)
    for tenant in tenants:
        assert outbox.flush(pool, sqs, sqs_queue, tenant=tenant).failed == 0
    messages = drain_queue(moto_endpoint, sqs_queue)

    # Every message names its subscription's tenant, and no subscription got another's.
    assert {m["webhook_id"] for m in messages} == set(endpoint_of)  # not the deleted one either
    assert all(m["tenant_id"] == endpoint_of[m["webhook_id"]] == m["payload"]["tenant_id"] for m in messages)
    with lambda_env(webhook_env(jobs_db, postgres_url)) as (dispatch, _):
        assert dispatch(sqs_event([json.dumps(m) for m in messages]), context("dispatch")) == \
            {"batchItemFailures": []}

    received: dict[str, list[dict[str, Any]]] = {tenant: [] for tenant in tenants}
    for request in receiver.history():
        assert request.verified and request.status == 200
        received[request.endpoint].append(json.loads(request.body))
    for tenant in tenants:
        assert sorted(body["type"] for body in received[tenant]) == sorted(EVENT_TYPES)
        assert {body["data"]["tenant_id"] for body in received[tenant]} == {tenant}
        for body in received[tenant]:  # what a receiver orders by (docs/webhooks.md)
            assert datetime.fromisoformat(body["timestamp"]).tzinfo is not None
            assert isinstance(body["sequence"], int)
    assert muted not in {m["webhook_id"] for m in messages}


def test_an_event_of_another_tenant_is_refused_without_a_request(
    webhook_db: str, pg_store: onceonly.Store, postgres_url: str, receiver: WebhookReceiver
) -> None:
    """What the old fan-out produced, or a subscription moved to another tenant
    since: the delivery is kept (dead, listed, re-drivable), nothing is sent."""
    secret = new_secret()
    webhook_id = create_subscription(webhook_db, receiver.endpoint("b", secret), secret, tenant_id="tenant-b")
    event_id = new_id("evt")
    with lambda_env(webhook_env(webhook_db, postgres_url)) as (dispatch, _):
        response = dispatch(sqs_event([message(webhook_id, event_id, tenant_id="tenant-a")]), context("dispatch"))
    assert response == {"batchItemFailures": []}
    delivery_id = delivery_id_for(webhook_id, event_id)
    row = deliveries(webhook_db, [delivery_id])[delivery_id]
    assert (row["status"], row["tenant_id"]) == ("dead", "tenant-a")
    (log,) = attempts(webhook_db, [delivery_id])
    assert (log["outcome"], log["error"]) == ("refused", "refused: the event belongs to another tenant than "
                                                         "the subscription")
    assert receiver.counts() == {}


# -- the upgrade ----------------------------------------------------------------
@pytest.fixture
def before_0004(postgres_server_url: str) -> Iterator[str]:
    """A fresh database with every migration before 0004 applied."""
    with migrated_before(postgres_server_url, "0004") as url:
        yield url


def _legacy(conn: psycopg.Connection[Any], webhook_id: str, event_ids: list[str],
            outbox_tenant: str | None = None) -> None:
    """A subscription and deliveries as the code before tenants wrote them."""
    conn.execute("INSERT INTO webhook_subscriptions (id, url, secret) VALUES (%s, 'https://x.test/', 'whsec_x')",
                 (webhook_id,))
    for event_id in event_ids:
        conn.execute("INSERT INTO webhook_deliveries (id, webhook_id, event_id, event_type, payload, status) "
                     "VALUES (%s, %s, %s, 'invoice.paid', '{}', 'retrying')",
                     (delivery_id_for(webhook_id, event_id), webhook_id, event_id))
        if outbox_tenant is not None:
            conn.execute("INSERT INTO webhook_outbox (event_id, webhook_id, event_type, tenant_id, payload) "
                         "VALUES (%s, %s, 'invoice.paid', %s, '{}')", (event_id, webhook_id, outbox_tenant))


def _tenants(url: str, table: str) -> dict[str, str | None]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        return {r["id"]: r["tenant_id"] for r in conn.execute(f"SELECT id, tenant_id FROM {table}")}  # noqa: S608


def test_upgrade_of_a_single_tenant_install_keeps_its_subscriptions_working(before_0004: str) -> None:
    with psycopg.connect(before_0004, autocommit=True) as conn:
        data.add_invoice(conn, "only", due_at="2026-12-01T00:00:00Z")
        _legacy(conn, "wh-1", ["evt-1"])
    assert "0004_webhook_tenants.sql" in migrate(before_0004)
    assert _tenants(before_0004, "webhook_subscriptions") == {"wh-1": "only"}
    assert _tenants(before_0004, "webhook_deliveries") == {delivery_id_for("wh-1", "evt-1"): "only"}


def test_upgrade_of_a_multi_tenant_install_leaves_no_subscription_receiving_another_tenants_events(
    before_0004: str,
) -> None:
    """Nobody can tell whose a subscription was (it got every tenant's events):
    it stays without a tenant and receives nothing until an operator assigns
    one. A delivery in flight keeps its event's tenant, from the outbox."""
    with psycopg.connect(before_0004, autocommit=True) as conn:
        data.add_invoice(conn, "t1", due_at="2026-12-01T00:00:00Z")
        data.add_invoice(conn, "t2", due_at="2026-12-01T00:00:00Z")
        _legacy(conn, "wh-1", ["evt-1"], outbox_tenant="t1")
        _legacy(conn, "wh-2", ["evt-2"])
    migrate(before_0004)
    assert _tenants(before_0004, "webhook_subscriptions") == {"wh-1": None, "wh-2": None}
    assert _tenants(before_0004, "webhook_deliveries") == {delivery_id_for("wh-1", "evt-1"): "t1",
                                                           delivery_id_for("wh-2", "evt-2"): None}
    with psycopg.connect(before_0004, autocommit=True) as conn:
        outbox.fan_out(conn, "evt-new", "invoice.paid", "t1", {})
        assert conn.execute("SELECT count(*) FROM webhook_outbox WHERE event_id = 'evt-new'").fetchone() == (0,)
        with pytest.raises(psycopg.errors.CheckViolation, match="webhook_subscriptions_tenant_required"):
            conn.execute("INSERT INTO webhook_subscriptions (id, url, secret) VALUES ('wh-3', 'https://x.test/', "
                         "'whsec_x')")
        conn.execute("UPDATE webhook_subscriptions SET tenant_id = 't1' WHERE id = 'wh-1'")  # the operator
        outbox.fan_out(conn, "evt-newer", "invoice.paid", "t1", {})
        rows = conn.execute("SELECT webhook_id FROM webhook_outbox WHERE event_id = 'evt-newer'").fetchall()
    assert rows == [("wh-1",)]
