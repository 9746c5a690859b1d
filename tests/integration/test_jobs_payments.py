"""The payment watcher against PostgreSQL, the fake payments API and moto's SQS:
cursor paging, each payment operation applied once, accepted assets, receiving
accounts and tenants, non-payment records, over/partial/late payments, ledger
times, webhook events, and the outbox sent whatever polling does."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from psycopg_pool import ConnectionPool

import onceonly
from onceonly_app.billing import payment_watcher
from onceonly_app.billing.assets import AcceptedAssets
from onceonly_app.billing.payments_api import PaymentsApiError, PaymentsClient
from onceonly_app.billing.webhook_events import fan_out, invoice_paid_event_id
from onceonly_app.budget import Budget
from onceonly_cli.fake_payments import FakePayments, random_account
from tests.support import jobs_data as data
from tests.support.jobs_helpers import aws_client, drain_queue
from tests.support.jobs_inprocess import run_tick

pytest_plugins = ("tests.support.jobs_fixtures",)

EURC_ISSUER = random_account()


@pytest.fixture
def webhooks(jobs_db: str, unique: str) -> Iterator[tuple[str, str]]:
    """One enabled and one disabled subscription of the test's tenant; the enabled
    one is disabled afterwards."""
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        enabled, disabled = data.add_subscription(conn, tenant), data.add_subscription(conn, tenant)
        data.disable_subscription(conn, disabled)
    yield enabled, disabled
    with data.connect(jobs_db) as conn:
        data.disable_subscription(conn, enabled)


class Watcher:
    """The payment watcher of one test: its own job (cursor), tenant, receiving
    account (the fake's receiver) and SQS queue."""

    def __init__(self, pool: ConnectionPool, store: onceonly.Store, job: str, fake: FakePayments,
                 moto_endpoint: str, queue_url: str, jobs_db: str) -> None:
        self.pool, self.store, self.job, self.api_url = pool, store, job, fake.url
        self.tenant = f"tenant-{job}"
        self.accepted = AcceptedAssets.parse(f"USD=USD:{fake.issuer} USD=USDC:{fake.issuer} "
                                             f"EUR=EURC:{EURC_ISSUER}")
        self.sqs = aws_client("sqs", moto_endpoint)
        self.queue_url = queue_url
        self.minute = 0
        with data.connect(jobs_db) as conn:
            data.add_receiving_account(conn, self.tenant, fake.receiver)

    def tick(self, page_limit: int = 200, budget: Budget | None = None) -> dict[str, Any]:
        self.minute += 1
        poll = payment_watcher.Poll(PaymentsClient(self.api_url), self.accepted, poller_ttl=30,
                                    page_limit=page_limit)
        report = run_tick(self.store, self.job, f"2026-11-29T10:{self.minute:02d}:00Z", lambda t: payment_watcher.run(
            self.pool, t, poll, self.sqs, self.queue_url, tenant=self.tenant, budget=budget))
        return report["result"].as_dict()  # type: ignore[no-any-return]


@pytest.fixture
def watcher(pool: ConnectionPool, pg_store: onceonly.Store, unique: str, fake_payments: FakePayments,
            moto_endpoint: str, sqs_queue: str, jobs_db: str) -> Watcher:
    return Watcher(pool, pg_store, unique, fake_payments, moto_endpoint, sqs_queue, jobs_db)


def payment_rows(jobs_db: str, job: str) -> list[dict[str, Any]]:
    with data.connect(jobs_db) as conn:
        return data.rows(conn, "SELECT payment_id, transaction_hash, invoice_id, amount_cents, outcome, reason,"
                               "       late, operation_type"
                               "  FROM payments WHERE poller = %s ORDER BY paging_token::numeric", job)


def statuses(jobs_db: str, *invoices: str) -> list[str]:
    with data.connect(jobs_db) as conn:
        return [data.rows(conn, "SELECT status FROM invoices WHERE id = %s", i)[0]["status"] for i in invoices]


def payment_events(jobs_db: str, tenant: str) -> list[tuple[str, str | None, str | None]]:
    with data.connect(jobs_db) as conn:
        return [(r["kind"], r["invoice_id"], r["detail"]["reason"]) for r in data.rows(
            conn, "SELECT kind, invoice_id, detail FROM activity_events WHERE tenant_id = %s"
                  " AND kind LIKE 'payment.%%' ORDER BY id", tenant)]


def test_pages_through_the_cursor_and_applies_each_payment_once(
        watcher: Watcher, fake_payments: FakePayments, jobs_db: str, webhooks: tuple[str, str],
        moto_endpoint: str, sqs_queue: str) -> None:
    tenant = watcher.tenant
    with data.connect(jobs_db) as conn:
        invoices = [data.add_invoice(conn, tenant, due_at="2026-12-01T00:00:00Z", amount_cents=300)
                    for _ in range(4)]
        overdue = data.add_invoice(conn, tenant, due_at="2026-11-01T00:00:00Z", status="overdue",
                                   amount_cents=300)
    records = [fake_payments.add(memo=i, amount="3.00") for i in [*invoices, overdue]]
    failed = fake_payments.add(memo=invoices[0], amount="3.00", successful=False)  # moved nothing

    first = watcher.tick(page_limit=2)
    again = watcher.tick(page_limit=2)

    # the third page held a payment and the failed transaction's record: full, so a fourth was asked for
    assert (first["pages"], first["payments_applied"], first["invoices_paid"]) == (4, 5, 5)
    assert (again["payments_applied"], again["webhooks"]) == (0, {"sent": 0, "failed": 0, "out_of_time": False})
    tokens = [r["paging_token"] for r in records]
    asked = [r["cursor"] for r in fake_payments.requests]
    assert asked[:4] == ["", tokens[1], tokens[3], failed["paging_token"]]  # followed the cursor, page by page
    with data.connect(jobs_db) as conn:
        (cursor,) = data.rows(conn, "SELECT cursor FROM payment_cursors WHERE poller = %s", watcher.job)
        effects = data.invoice_effects(conn, tenant)
    assert cursor["cursor"] == failed["paging_token"]  # past the skipped record
    assert len(payment_rows(jobs_db, watcher.job)) == 5
    assert effects["statuses"] == {"paid": 5}
    assert sorted((h["from_status"], h["to_status"]) for h in effects["history"]) == [
        ("open", "paid")] * 4 + [("overdue", "paid")]
    messages = drain_queue(moto_endpoint, sqs_queue)
    enabled, disabled = webhooks
    mine = [m for m in messages if m["webhook_id"] == enabled]
    assert not [m for m in messages if m["webhook_id"] == disabled]
    assert sorted(m["event_id"] for m in mine) == sorted(invoice_paid_event_id(i) for i in [*invoices, overdue])
    assert set(mine[0]) == {"webhook_id", "tenant_id", "event_id", "event_type", "payload", "occurred_at",
                            "sequence"}
    assert mine[0]["tenant_id"] == tenant
    assert mine[0]["event_type"] == "invoice.paid" and mine[0]["payload"]["tenant_id"] == tenant


def test_a_payment_seen_again_is_not_applied_again(
        watcher: Watcher, fake_payments: FakePayments, jobs_db: str, webhooks: tuple[str, str],
        moto_endpoint: str, sqs_queue: str) -> None:
    with data.connect(jobs_db) as conn:
        invoice = data.add_invoice(conn, watcher.tenant, due_at="2026-12-01T00:00:00Z", amount_cents=1000)
    fake_payments.add(memo=invoice, amount="4.00")
    fake_payments.add(memo=invoice, amount="6.00")  # the second one covers the invoice
    fake_payments.add(memo="inv_unknown", amount="1.00")

    first = watcher.tick()
    with data.connect(jobs_db) as conn:  # e.g. a cursor restored from a backup
        conn.execute("UPDATE payment_cursors SET cursor = '' WHERE poller = %s", (watcher.job,))
    replay = watcher.tick()

    assert (first["payments_applied"], first["invoices_paid"], first["unmatched"]) == (3, 1, 1)
    assert (replay["payments_applied"], replay["invoices_paid"]) == (0, 0)
    assert [(p["invoice_id"], p["amount_cents"], p["outcome"]) for p in payment_rows(jobs_db, watcher.job)] == [
        (invoice, 400, "partial"), (invoice, 600, "settled"), (None, 100, "unmatched")]
    with data.connect(jobs_db) as conn:
        effects = data.invoice_effects(conn, watcher.tenant)
    assert effects["statuses"] == {"paid": 1} and len(effects["history"]) == 1
    mine = [m for m in drain_queue(moto_endpoint, sqs_queue) if m["webhook_id"] == webhooks[0]]
    assert len(mine) == 1


def test_only_an_accepted_asset_of_the_invoices_currency_pays_it(
        watcher: Watcher, fake_payments: FakePayments, jobs_db: str) -> None:
    with data.connect(jobs_db) as conn:
        invoice = data.add_invoice(conn, watcher.tenant, due_at="2026-12-01T00:00:00Z", amount_cents=100_00)
    fake_payments.add(memo=invoice, amount="100", asset_code=None)  # 100 XLM, the native asset
    fake_payments.add(memo=invoice, amount="100", asset_code="USD", asset_issuer=random_account())  # self-issued
    fake_payments.add(memo=invoice, amount="100", asset_code="EURC", asset_issuer=EURC_ISSUER)  # accepted, for EUR

    unpaid = watcher.tick()

    assert (unpaid["payments_applied"], unpaid["unmatched"], unpaid["invoices_paid"]) == (3, 3, 0)
    assert statuses(jobs_db, invoice) == ["open"]
    assert [(p["outcome"], p["reason"], p["amount_cents"]) for p in payment_rows(jobs_db, watcher.job)] == [
        ("unmatched", "asset_not_accepted", None), ("unmatched", "asset_not_accepted", None),
        ("unmatched", "wrong_currency", 100_00)]
    assert payment_events(jobs_db, watcher.tenant) == [
        ("payment.unmatched", invoice, "asset_not_accepted"), ("payment.unmatched", invoice, "asset_not_accepted"),
        ("payment.unmatched", invoice, "wrong_currency")]

    fake_payments.add(memo=invoice, amount="100", asset_code="USDC")  # an accepted USD asset
    paid = watcher.tick()
    assert (paid["payments_applied"], paid["invoices_paid"], paid["unmatched"]) == (1, 1, 0)
    assert statuses(jobs_db, invoice) == ["paid"]


def test_each_payment_operation_of_one_transaction_counts(
        watcher: Watcher, fake_payments: FakePayments, jobs_db: str, webhooks: tuple[str, str],
        moto_endpoint: str, sqs_queue: str) -> None:
    with data.connect(jobs_db) as conn:
        halves = data.add_invoice(conn, watcher.tenant, due_at="2026-12-01T00:00:00Z", amount_cents=100_00)
        first, second = (data.add_invoice(conn, watcher.tenant, due_at="2026-12-01T00:00:00Z", amount_cents=500)
                         for _ in range(2))
    halves_tx = fake_payments.add_transaction([fake_payments.payment("50.00"), fake_payments.payment("50.00")],
                                              memo=halves)
    # two transactions in a row, one invoice each: one invoice.paid event per invoice
    singles = [fake_payments.add(memo=i, amount="5.00") for i in (first, second)]

    result = watcher.tick()

    assert (result["payments_applied"], result["invoices_paid"]) == (4, 3)
    rows = payment_rows(jobs_db, watcher.job)
    assert [(p["transaction_hash"], p["amount_cents"], p["outcome"]) for p in rows[:2]] == [
        (halves_tx[0]["transaction_hash"], 50_00, "partial"), (halves_tx[0]["transaction_hash"], 50_00, "settled")]
    assert [p["payment_id"] for p in rows] == [r["id"] for r in [*halves_tx, *singles]]
    assert statuses(jobs_db, halves, first, second) == ["paid"] * 3
    mine = [m for m in drain_queue(moto_endpoint, sqs_queue) if m["webhook_id"] == webhooks[0]]
    assert sorted(m["payload"]["invoice_id"] for m in mine) == sorted([halves, first, second])


def test_records_that_are_not_payments_to_us_are_skipped_and_the_cursor_moves_past_them(
        watcher: Watcher, fake_payments: FakePayments, jobs_db: str) -> None:
    with data.connect(jobs_db) as conn:
        invoice = data.add_invoice(conn, watcher.tenant, due_at="2026-12-01T00:00:00Z", amount_cents=700)
    others = [
        *fake_payments.add_transaction([fake_payments.create_account("10")]),  # no amount: a starting balance
        *fake_payments.add_transaction([fake_payments.account_merge()]),
        fake_payments.add(memo=invoice, amount="7", to=random_account()),  # sent FROM our account to another
    ]
    payment = fake_payments.add(memo=invoice, amount="7")

    result = watcher.tick(page_limit=2)

    assert (result["skipped"], result["payments_applied"], result["invoices_paid"]) == (3, 1, 1)
    assert result["cursor"] == payment["paging_token"]
    assert [p["payment_id"] for p in payment_rows(jobs_db, watcher.job)] == [payment["id"]]
    assert [o["type"] for o in others] == ["create_account", "account_merge", "payment"]
    assert statuses(jobs_db, invoice) == ["paid"]


def test_a_path_payment_counts_what_the_recipient_received(
        watcher: Watcher, fake_payments: FakePayments, jobs_db: str) -> None:
    with data.connect(jobs_db) as conn:
        sent, received = (data.add_invoice(conn, watcher.tenant, due_at="2026-12-01T00:00:00Z",
                                           amount_cents=25_00) for _ in range(2))
    fake_payments.add_transaction([fake_payments.path_payment("25.00", source_amount="300", strict="send")],
                                  memo=sent)
    fake_payments.add_transaction([fake_payments.path_payment("24.99", source_amount="250", strict="receive")],
                                  memo=received)

    result = watcher.tick()

    assert (result["payments_applied"], result["invoices_paid"], result["partial"]) == (2, 1, 1)
    assert [(p["operation_type"], p["amount_cents"], p["outcome"]) for p in payment_rows(jobs_db, watcher.job)] == [
        ("path_payment_strict_send", 25_00, "settled"), ("path_payment_strict_receive", 24_99, "partial")]
    assert statuses(jobs_db, sent, received) == ["paid", "open"]


def test_the_memo_is_matched_only_within_the_receiving_accounts_tenant(
        watcher: Watcher, fake_payments: FakePayments, jobs_db: str) -> None:
    other_tenant, other_account = f"{watcher.tenant}-other", random_account()
    with data.connect(jobs_db) as conn:
        data.add_receiving_account(conn, other_tenant, other_account)
        theirs = data.add_invoice(conn, other_tenant, due_at="2026-12-01T00:00:00Z", amount_cents=900)
    into_ours = fake_payments.add(memo=theirs, amount="9")  # to OUR account, naming THEIR invoice

    result = watcher.tick()

    assert (result["unmatched"], result["invoices_paid"]) == (1, 0)
    assert statuses(jobs_db, theirs) == ["open"]
    assert [(p["payment_id"], p["outcome"], p["reason"], p["invoice_id"])
            for p in payment_rows(jobs_db, watcher.job)] == [(into_ours["id"], "unmatched", "unknown_invoice", None)]
    assert payment_events(jobs_db, other_tenant) == []


def test_partial_over_late_and_closed_invoice_payments_are_visible(
        watcher: Watcher, fake_payments: FakePayments, jobs_db: str) -> None:
    with data.connect(jobs_db) as conn:
        def invoice(status: str = "open") -> str:
            return data.add_invoice(conn, watcher.tenant, due_at="2026-11-01T00:00:00Z", status=status,
                                    amount_cents=10_00)
        partly, late, over, paid, void = invoice(), invoice("overdue"), invoice(), invoice("paid"), invoice("void")
    for memo, amount in ((partly, "4"), (late, "10"), (over, "15"), (paid, "5"), (void, "5"), (None, "1")):
        fake_payments.add(memo=memo, amount=amount)

    result = watcher.tick()

    assert {k: result[k] for k in ("partial", "overpaid", "late", "unmatched", "invoices_paid")} == {
        "partial": 1, "overpaid": 1, "late": 1, "unmatched": 3, "invoices_paid": 2}
    assert payment_events(jobs_db, watcher.tenant) == [
        ("payment.partial", partly, None), ("payment.late", late, None), ("payment.overpaid", over, None),
        ("payment.unmatched", paid, "invoice_paid"), ("payment.unmatched", void, "invoice_void"),
        ("payment.unmatched", None, "no_memo")]
    assert statuses(jobs_db, partly, late, over, paid, void) == ["open", "paid", "paid", "paid", "void"]
    assert [p["late"] for p in payment_rows(jobs_db, watcher.job)] == [False, True, False, False, False, False]


def test_paid_at_is_the_ledger_time_of_the_payment(
        watcher: Watcher, fake_payments: FakePayments, jobs_db: str, webhooks: tuple[str, str],
        moto_endpoint: str, sqs_queue: str) -> None:
    ledger_time = datetime(2026, 11, 20, 8, 15, 30, tzinfo=UTC)
    with data.connect(jobs_db) as conn:
        invoice = data.add_invoice(conn, watcher.tenant, due_at="2026-12-01T00:00:00Z", amount_cents=200)
    fake_payments.add(memo=invoice, amount="2", created_at=ledger_time)

    watcher.tick()

    with data.connect(jobs_db) as conn:
        (row,) = data.rows(conn, "SELECT paid_at FROM invoices WHERE id = %s", invoice)
    assert row["paid_at"] == ledger_time
    (message,) = [m for m in drain_queue(moto_endpoint, sqs_queue) if m["webhook_id"] == webhooks[0]]
    assert datetime.fromisoformat(message["payload"]["paid_at"]) == ledger_time


def test_the_outbox_is_sent_even_when_polling_fails(
        watcher: Watcher, fake_payments: FakePayments, jobs_db: str, pool: ConnectionPool,
        webhooks: tuple[str, str], moto_endpoint: str, sqs_queue: str) -> None:
    with pool.connection() as conn, conn.transaction():  # an event an earlier run committed, not yet sent
        fan_out(conn, "evt_committed_earlier", "invoice.paid", watcher.tenant, {"invoice_id": "inv_x"})
    fake_payments.stop()  # the payments API is down

    with pytest.raises(PaymentsApiError):
        watcher.tick()

    mine = [m for m in drain_queue(moto_endpoint, sqs_queue) if m["webhook_id"] == webhooks[0]]
    assert [m["event_id"] for m in mine] == ["evt_committed_earlier"]


def test_a_run_without_time_for_a_page_polls_nothing_but_still_sends(
        watcher: Watcher, fake_payments: FakePayments, jobs_db: str, pool: ConnectionPool,
        webhooks: tuple[str, str], moto_endpoint: str, sqs_queue: str) -> None:
    with data.connect(jobs_db) as conn:
        invoice = data.add_invoice(conn, watcher.tenant, due_at="2026-12-01T00:00:00Z", amount_cents=200)
    fake_payments.add(memo=invoice, amount="2")
    with pool.connection() as conn, conn.transaction():
        fan_out(conn, "evt_waiting", "invoice.paid", watcher.tenant, {"invoice_id": "inv_y"})
    # 20 s left: after the reserve (5 s), enough for the SQS call of the flush (15 s), not for a page too
    almost_out = Budget(lambda: 20.0)

    result = watcher.tick(budget=almost_out)

    assert result["out_of_time"] is True and result["pages"] == 0
    assert fake_payments.requests == []
    assert statuses(jobs_db, invoice) == ["open"]
    assert [m["event_id"] for m in drain_queue(moto_endpoint, sqs_queue) if m["webhook_id"] == webhooks[0]] == [
        "evt_waiting"]


def test_a_flush_without_time_for_an_sqs_call_leaves_the_outbox_for_the_next_run(
        watcher: Watcher, pool: ConnectionPool, webhooks: tuple[str, str], moto_endpoint: str,
        sqs_queue: str) -> None:
    with pool.connection() as conn, conn.transaction():
        fan_out(conn, "evt_later", "invoice.paid", watcher.tenant, {"invoice_id": "inv_z"})

    def sent() -> list[str]:
        return [m["event_id"] for m in drain_queue(moto_endpoint, sqs_queue) if m["webhook_id"] == webhooks[0]]

    result = watcher.tick(budget=Budget(lambda: 10.0))  # less than one bounded SQS call after the reserve
    assert result["webhooks"] == {"sent": 0, "failed": 0, "out_of_time": True} and sent() == []
    later = watcher.tick()
    assert later["webhooks"]["sent"] >= 1 and sent() == ["evt_later"]
