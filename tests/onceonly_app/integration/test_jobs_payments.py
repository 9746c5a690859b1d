"""The payment watcher against PostgreSQL, the fake payments API and moto's SQS:
cursor paging, each payment operation applied once, accepted assets, receiving
accounts and tenants, non-payment records, over/partial/late payments, ledger
times, webhook events, and the outbox sent whatever polling does."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import onceonly
from onceonly_app.billing import overdue, payment_watcher
from onceonly_app.billing.assets import AcceptedAssets
from onceonly_app.billing.payments_api import PaymentsApiError, PaymentsClient
from onceonly_app.events.outbox import fan_out
from onceonly_app.events.types import invoice_paid_event_id
from onceonly_app.runtime.budget import Budget
from onceonly_cli.testing.fake_payments import FakePayments, random_account
from tests.support.jobs import jobs_data as data
from tests.support.jobs.jobs_helpers import aws_client, drain_queue
from tests.support.jobs.jobs_inprocess import run_tick

EURC_ISSUER = random_account()


@pytest.fixture
def webhooks(jobs_db: str, unique: str) -> Iterator[tuple[str, str]]:
    """One live and one deleted subscription of the test's tenant; the live one is
    deleted afterwards."""
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        enabled, deleted = data.add_subscription(conn, tenant), data.add_subscription(conn, tenant)
        data.delete_subscription(conn, deleted)
    yield enabled, deleted
    with data.connect(jobs_db) as conn:
        data.delete_subscription(conn, enabled)


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
        self.cursor_row = payment_watcher.cursor_name(job, fake.receiver)  # the receiving account's feed
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
    asked = [r["cursor"] for r in fake_payments.requests if "cursor" in r]  # the pages, not the root resource
    assert asked[:4] == ["", tokens[1], tokens[3], failed["paging_token"]]  # followed the cursor, page by page
    with data.connect(jobs_db) as conn:
        (cursor,) = data.rows(conn, "SELECT cursor FROM payment_cursors WHERE poller = %s", watcher.cursor_row)
        effects = data.invoice_effects(conn, tenant)
    assert cursor["cursor"] == failed["paging_token"]  # past the skipped record
    assert len(payment_rows(jobs_db, watcher.job)) == 5
    assert effects["statuses"] == {"paid": 5}
    assert sorted((h["from_status"], h["to_status"]) for h in effects["history"]) == [
        ("open", "paid")] * 4 + [("overdue", "paid")]
    messages = drain_queue(moto_endpoint, sqs_queue)
    enabled, deleted = webhooks
    mine = [m for m in messages if m["webhook_id"] == enabled]
    assert not [m for m in messages if m["webhook_id"] == deleted]
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
        conn.execute("UPDATE payment_cursors SET cursor = '' WHERE poller = %s", (watcher.cursor_row,))
    replay = watcher.tick()

    assert (first["payments_applied"], first["invoices_paid"], first["unmatched"]) == (3, 1, 1)
    assert (replay["payments_applied"], replay["invoices_paid"]) == (0, 0)
    assert [(p["invoice_id"], p["amount_cents"], p["outcome"]) for p in payment_rows(jobs_db, watcher.job)] == [
        (invoice, 400, "partial"), (invoice, 600, "settled"), (None, 100, "unmatched")]
    with data.connect(jobs_db) as conn:
        effects = data.invoice_effects(conn, watcher.tenant)
    assert effects["statuses"] == {"paid": 1} and len(effects["history"]) == 1
    mine = [m for m in drain_queue(moto_endpoint, sqs_queue) if m["webhook_id"] == webhooks[0]]
    assert sorted(m["event_type"] for m in mine) == ["invoice.paid", "payment.unmatched"]  # once each


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
        *fake_payments.add_transaction([fake_payments.payment("7", to=random_account(), sender=fake_payments.receiver)],
                                       memo=invoice),  # sent FROM our account to another
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
        def invoice(status: str = "open", due_at: str = "2099-01-01T00:00:00Z") -> str:
            return data.add_invoice(conn, watcher.tenant, due_at=due_at, status=status, amount_cents=10_00)
        partly, over, paid, void = invoice(), invoice(), invoice("paid"), invoice("void")
        late = invoice("overdue", due_at="2026-11-01T00:00:00Z")  # paid now, after its due day ended
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


def test_partial_payments_that_add_up_exactly_pay_the_invoice(
        watcher: Watcher, fake_payments: FakePayments, jobs_db: str, webhooks: tuple[str, str],
        moto_endpoint: str, sqs_queue: str) -> None:
    """50.005 + 49.995 USDC is 100.00 USD: each part is kept to the stroop, not
    rounded down to 50.00 and 49.99 on its own."""
    with data.connect(jobs_db) as conn:
        invoice = data.add_invoice(conn, watcher.tenant, due_at="2026-12-01T00:00:00Z", amount_cents=100_00)
    fake_payments.add(memo=invoice, amount="50.005", asset_code="USDC")
    fake_payments.add(memo=invoice, amount="49.995", asset_code="USDC")

    result = watcher.tick()

    assert (result["payments_applied"], result["partial"], result["invoices_paid"]) == (2, 1, 1)
    assert [(p["amount_cents"], p["outcome"]) for p in payment_rows(jobs_db, watcher.job)] == [
        (Decimal("5000.5"), "partial"), (Decimal("4999.5"), "settled")]
    assert statuses(jobs_db, invoice) == ["paid"]
    mine = [m for m in drain_queue(moto_endpoint, sqs_queue) if m["webhook_id"] == webhooks[0]]
    assert [m["payload"]["invoice_id"] for m in mine] == [invoice]


def test_a_stroop_more_is_overpaid_and_a_stroop_less_leaves_the_invoice_open(
        watcher: Watcher, fake_payments: FakePayments, jobs_db: str) -> None:
    with data.connect(jobs_db) as conn:
        over, short = (data.add_invoice(conn, watcher.tenant, due_at="2026-12-01T00:00:00Z", amount_cents=100_00)
                       for _ in range(2))
    fake_payments.add(memo=over, amount="100.0000001")
    fake_payments.add(memo=short, amount="99.9999999")

    result = watcher.tick()

    assert (result["overpaid"], result["partial"], result["invoices_paid"]) == (1, 1, 1)
    assert statuses(jobs_db, over, short) == ["paid", "open"]
    assert [(p["amount_cents"], p["outcome"]) for p in payment_rows(jobs_db, watcher.job)] == [
        (Decimal("10000.00001"), "overpaid"), (Decimal("9999.99999"), "partial")]


def test_a_thousand_sub_cent_payments_add_up_to_the_amount(
        watcher: Watcher, fake_payments: FakePayments, jobs_db: str) -> None:
    """1,000 x 0.005 = 5.00: rounded one by one, each would credit nothing."""
    with data.connect(jobs_db) as conn:
        invoice = data.add_invoice(conn, watcher.tenant, due_at="2026-12-01T00:00:00Z", amount_cents=5_00)
    for _ in range(1000):
        fake_payments.add(memo=invoice, amount="0.0050000")

    result = watcher.tick()

    assert (result["payments_applied"], result["partial"], result["invoices_paid"], result["overpaid"]) == (
        1000, 999, 1, 0)
    assert statuses(jobs_db, invoice) == ["paid"]
    outcomes = [p["outcome"] for p in payment_rows(jobs_db, watcher.job)]
    assert outcomes == ["partial"] * 999 + ["settled"]


def run_overdue(watcher: Watcher, when: datetime) -> overdue.OverdueResult:
    tick = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return run_tick(watcher.store, f"{watcher.job}-overdue", tick, lambda t: overdue.run(  # type: ignore[no-any-return]
        watcher.pool, t, watcher=watcher.job, tenant=watcher.tenant))["result"]


def test_an_on_time_payment_seen_late_is_not_dunned(
        watcher: Watcher, fake_payments: FakePayments, jobs_db: str) -> None:
    """The payments API is down across the overdue run: an invoice paid on its
    due day (by ledger time) is held, not dunned, and is paid on time once the
    watcher reads the payment; an invoice whose due day ended before what the
    watcher had read moves as before."""
    now = datetime.now(UTC)
    due = now + timedelta(hours=3)  # its due day ends at the next midnight (UTC tenant) after that
    due_day_end = datetime.combine(due.date() + timedelta(days=1), datetime.min.time(), UTC)
    with data.connect(jobs_db) as conn:
        on_time = data.add_invoice(conn, watcher.tenant, due_at=due, amount_cents=10_00)
        unpaid = data.add_invoice(conn, watcher.tenant, due_at=now - timedelta(days=3), amount_cents=10_00)
    watcher.tick()  # the ledger is read up to about now: past the unpaid invoice's due day, not the other's
    fake_payments.stop()  # the payments API goes down; the customer pays on the due day meanwhile
    fake_payments.add(memo=on_time, amount="10", created_at=now)

    with pytest.raises(PaymentsApiError):
        watcher.tick()
    run = run_overdue(watcher, due_day_end + timedelta(hours=2))

    assert (run.transitioned, run.held) == (1, 1) and statuses(jobs_db, on_time, unpaid) == ["open", "overdue"]
    fake_payments.start()
    watcher.api_url = fake_payments.url
    assert watcher.tick()["invoices_paid"] == 1
    assert statuses(jobs_db, on_time) == ["paid"]
    with data.connect(jobs_db) as conn:
        emails = data.rows(conn, "SELECT invoice_id FROM notifications WHERE tenant_id = %s", watcher.tenant)
        history = data.rows(conn, "SELECT to_status FROM invoice_status_history WHERE invoice_id = %s", on_time)
    assert emails == [{"invoice_id": unpaid}] and history == [{"to_status": "paid"}]
    assert [p["late"] for p in payment_rows(jobs_db, watcher.job)] == [False]


def test_the_overdue_email_states_what_is_still_due_after_a_partial_payment(
        watcher: Watcher, fake_payments: FakePayments, jobs_db: str) -> None:
    with data.connect(jobs_db) as conn:
        invoice = data.add_invoice(conn, watcher.tenant, due_at="2026-11-01T00:00:00Z", amount_cents=100_00)
    fake_payments.add(memo=invoice, amount="40.005", created_at=datetime(2026, 10, 30, tzinfo=UTC))
    watcher.tick()

    assert run_overdue(watcher, datetime(2026, 11, 29, 2, tzinfo=UTC)).transitioned == 1
    with data.connect(jobs_db) as conn:
        (email,) = data.rows(conn, "SELECT body_text FROM notifications WHERE invoice_id = %s", invoice)
    # 59.995 is still due: shown rounded up, so paying what is shown settles
    assert "60.00 USD of 100.00 USD is still due" in email["body_text"], email["body_text"]


def test_an_invoice_in_lower_case_usd_is_stored_as_usd_and_can_be_paid(
        watcher: Watcher, fake_payments: FakePayments, jobs_db: str) -> None:
    with data.connect(jobs_db) as conn:
        invoice = data.add_invoice(conn, watcher.tenant, due_at="2026-12-01T00:00:00Z", amount_cents=10_00,
                                   currency=" usd")
        (stored,) = data.rows(conn, "SELECT currency FROM invoices WHERE id = %s", invoice)
    fake_payments.add(memo=invoice, amount="10")

    result = watcher.tick()

    assert stored == {"currency": "USD"}
    assert (result["invoices_paid"], result["unmatched"]) == (1, 0)
    assert statuses(jobs_db, invoice) == ["paid"]


@pytest.mark.parametrize("currency", ["US", "USDX", "U$D", "", "dollars"])
def test_a_currency_that_is_not_a_three_letter_code_is_refused_when_stored(
        jobs_db: str, unique: str, currency: str) -> None:
    with data.connect(jobs_db) as conn:
        with pytest.raises(psycopg.errors.CheckViolation, match="currency"):
            data.add_invoice(conn, f"tenant-{unique}", due_at="2026-12-01T00:00:00Z", currency=currency)
        schedule = data.add_schedule(conn, f"tenant-{unique}", cadence="daily", anchor=date(2026, 11, 1))
        with pytest.raises(psycopg.errors.CheckViolation, match="currency"):
            conn.execute("UPDATE billing_schedules SET currency = %s WHERE id = %s", (currency, schedule))
        conn.execute("UPDATE billing_schedules SET currency = 'eur' WHERE id = %s", (schedule,))
        assert data.rows(conn, "SELECT currency FROM billing_schedules WHERE id = %s", schedule) == [
            {"currency": "EUR"}]
