"""The payment watcher against PostgreSQL, the fake payments API and moto's SQS:
cursor paging, each payment applied once, partial payments, webhook events."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from psycopg_pool import ConnectionPool

import onceonly
from onceonly_app.billing import payment_watcher
from onceonly_app.billing.payments_api import PaymentsClient
from onceonly_app.billing.webhook_events import invoice_paid_event_id
from onceonly_cli.fake_payments import FakePayments
from tests.support import jobs_data as data
from tests.support.jobs_helpers import aws_client, drain_queue
from tests.support.jobs_inprocess import run_tick

pytest_plugins = ("tests.support.jobs_fixtures",)


@pytest.fixture
def webhooks(jobs_db: str) -> Iterator[tuple[str, str]]:
    """One enabled and one disabled subscription; the enabled one is disabled
    afterwards so that later tests' payments do not fan out to it."""
    with data.connect(jobs_db) as conn:
        enabled, disabled = data.add_subscription(conn), data.add_subscription(conn)
        data.disable_subscription(conn, disabled)
    yield enabled, disabled
    with data.connect(jobs_db) as conn:
        data.disable_subscription(conn, enabled)


class Watcher:
    def __init__(self, pool: ConnectionPool, store: onceonly.Store, job: str, fake: FakePayments,
                 moto_endpoint: str, queue_url: str) -> None:
        self.pool, self.store, self.job = pool, store, job
        self.client = PaymentsClient(fake.url)
        self.sqs = aws_client("sqs", moto_endpoint)
        self.queue_url = queue_url
        self.minute = 0

    def tick(self, page_limit: int = 200) -> dict[str, Any]:
        self.minute += 1
        report = run_tick(self.store, self.job, f"2026-11-29T10:{self.minute:02d}:00Z", lambda t: payment_watcher.run(
            self.pool, t, self.client, self.sqs, self.queue_url, poller_ttl=30, page_limit=page_limit))
        return report["result"].as_dict()  # type: ignore[no-any-return]


@pytest.fixture
def watcher(pool: ConnectionPool, pg_store: onceonly.Store, unique: str, fake_payments: FakePayments,
            moto_endpoint: str, sqs_queue: str) -> Watcher:
    return Watcher(pool, pg_store, unique, fake_payments, moto_endpoint, sqs_queue)


def test_pages_through_the_cursor_and_applies_each_payment_once(
        watcher: Watcher, fake_payments: FakePayments, jobs_db: str, unique: str, webhooks: tuple[str, str],
        moto_endpoint: str, sqs_queue: str) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        invoices = [data.add_invoice(conn, tenant, due_at="2026-12-01T00:00:00Z", amount_cents=300)
                    for _ in range(4)]
        overdue = data.add_invoice(conn, tenant, due_at="2026-11-01T00:00:00Z", status="overdue",
                                   amount_cents=300)
    records = [fake_payments.add(memo=i, amount="3.00") for i in [*invoices, overdue]]
    fake_payments.add(memo=invoices[0], amount="3.00", successful=False)  # a failed transaction moved nothing

    first = watcher.tick(page_limit=2)
    again = watcher.tick(page_limit=2)

    assert (first["pages"], first["payments_applied"], first["invoices_paid"]) == (3, 5, 5)
    assert (again["payments_applied"], again["webhooks"]) == (0, {"sent": 0, "failed": 0})
    tokens = [r["paging_token"] for r in records]
    asked = [r["cursor"] for r in fake_payments.requests]
    assert asked[:3] == ["", tokens[1], tokens[3]]  # followed the cursor, page by page
    with data.connect(jobs_db) as conn:
        (cursor,) = data.rows(conn, "SELECT cursor FROM payment_cursors WHERE poller = %s", unique)
        effects = data.invoice_effects(conn, tenant)
        applied = data.rows(conn, "SELECT count(*) AS n FROM payments WHERE poller = %s", unique)
    assert cursor["cursor"] == str(int(tokens[-1]) + 4096)  # the skipped failed record's token
    assert applied == [{"n": 5}]
    assert effects["statuses"] == {"paid": 5}
    assert sorted((h["from_status"], h["to_status"]) for h in effects["history"]) == [
        ("open", "paid")] * 4 + [("overdue", "paid")]
    messages = drain_queue(moto_endpoint, sqs_queue)
    enabled, disabled = webhooks
    mine = [m for m in messages if m["webhook_id"] == enabled]
    assert not [m for m in messages if m["webhook_id"] == disabled]
    assert sorted(m["event_id"] for m in mine) == sorted(invoice_paid_event_id(r["transaction_hash"])
                                                        for r in records)
    assert set(mine[0]) == {"webhook_id", "event_id", "event_type", "payload"}
    assert mine[0]["event_type"] == "invoice.paid" and mine[0]["payload"]["tenant_id"] == tenant


def test_a_payment_seen_again_is_not_applied_again(
        watcher: Watcher, fake_payments: FakePayments, jobs_db: str, unique: str, webhooks: tuple[str, str],
        moto_endpoint: str, sqs_queue: str) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        invoice = data.add_invoice(conn, tenant, due_at="2026-12-01T00:00:00Z", amount_cents=1000)
    fake_payments.add(memo=invoice, amount="4.00")
    fake_payments.add(memo=invoice, amount="6.00")  # the second one covers the invoice
    fake_payments.add(memo="inv_unknown", amount="1.00")

    first = watcher.tick()
    with data.connect(jobs_db) as conn:  # e.g. a cursor restored from a backup
        conn.execute("UPDATE payment_cursors SET cursor = '' WHERE poller = %s", (unique,))
    replay = watcher.tick()

    assert (first["payments_applied"], first["invoices_paid"]) == (3, 1)
    assert (replay["payments_applied"], replay["invoices_paid"]) == (0, 0)
    with data.connect(jobs_db) as conn:
        payments = data.rows(conn, "SELECT invoice_id, amount_cents FROM payments WHERE poller = %s"
                                   " ORDER BY paging_token::numeric", unique)
        effects = data.invoice_effects(conn, tenant)
    assert payments == [{"invoice_id": invoice, "amount_cents": 400}, {"invoice_id": invoice, "amount_cents": 600},
                        {"invoice_id": None, "amount_cents": 100}]
    assert effects["statuses"] == {"paid": 1} and len(effects["history"]) == 1
    mine = [m for m in drain_queue(moto_endpoint, sqs_queue) if m["webhook_id"] == webhooks[0]]
    assert len(mine) == 1
