"""Billing keeps what it told people, on the real jobs against PostgreSQL and a
Horizon-shaped payments server on 127.0.0.1: a due date promised at issue
stays put when the tenant's zone changes, an invoice issued late is not born
overdue, a schedule created inactive is not billed for its inactive spell,
an amount change is compared with what was paid, amounts a float cannot carry
settle exactly, and merchants hear what customers hear."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import onceonly
from onceonly_app.billing import overdue, payment_watcher, recurring
from onceonly_app.billing.assets import AcceptedAssets
from onceonly_app.billing.payments_api import PaymentsClient
from onceonly_cli.testing.fake_payments import FakePayments, random_account
from tests.support.jobs import jobs_data as data
from tests.support.jobs.jobs_helpers import aws_client, drain_queue, new_id
from tests.support.jobs.jobs_inprocess import run_tick


class Billing:
    """One test's tenant, with its receiving account on the fake payments server,
    a webhook subscription, and the real jobs run tick by tick in this process."""

    def __init__(self, pool: ConnectionPool, store: onceonly.Store, jobs_db: str, unique: str,
                 fake: FakePayments, moto_endpoint: str, queue_url: str) -> None:
        self.pool, self.store, self.db, self.fake = pool, store, jobs_db, fake
        self.tenant, self.job = f"tenant-{unique}", unique
        self.sqs, self.queue_url, self.moto_endpoint = aws_client("sqs", moto_endpoint), queue_url, moto_endpoint
        self.ticks = 0
        with data.connect(jobs_db) as conn:
            data.add_receiving_account(conn, self.tenant, fake.receiver)
            self.webhook = data.add_subscription(conn, self.tenant)

    def sql(self, query: str, *params: Any) -> list[dict[str, Any]]:
        with data.connect(self.db) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    def schedule(self, *, anchor: date, cadence: str = "monthly", due_days: int = 0, amount_cents: int = 10_00,
                 active: bool = True) -> str:
        schedule_id = new_id("sch")
        self.sql("INSERT INTO billing_schedules (id, tenant_id, customer_email, amount_cents, cadence, anchor,"
                 " due_days, active) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                 schedule_id, self.tenant, f"{schedule_id}@{self.tenant}.test", amount_cents, cadence, anchor,
                 due_days, active)
        return schedule_id

    def set_zone(self, zone: str) -> None:
        self.sql("INSERT INTO billing_tenants (tenant_id, time_zone) VALUES (%s, %s) ON CONFLICT (tenant_id)"
                 " DO UPDATE SET time_zone = EXCLUDED.time_zone, updated_at = now()", self.tenant, zone)

    def _tick(self, job: str, when: datetime | str, body: Any) -> Any:
        at = when if isinstance(when, str) else when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return run_tick(self.store, f"{self.job}-{job}", at, body)["result"]

    def bill(self, when: datetime | str) -> int:
        return int(self._tick("recurring", when, lambda t: recurring.run(self.pool, t, tenant=self.tenant)).generated)

    def dun(self, when: datetime | str) -> overdue.OverdueResult:
        return self._tick("overdue", when, lambda t: overdue.run(  # type: ignore[no-any-return]
            self.pool, t, watcher=f"{self.job}-watcher", tenant=self.tenant))

    def watch(self) -> dict[str, Any]:
        self.ticks += 1
        poll = payment_watcher.Poll(PaymentsClient(self.fake.url), AcceptedAssets.parse(f"USD=USDC:{self.fake.issuer}"),
                                    poller_ttl=30)
        result = self._tick("watcher", f"2026-01-01T00:{self.ticks:02d}:00Z", lambda t: payment_watcher.run(
            self.pool, t, poll, self.sqs, self.queue_url, tenant=self.tenant))
        return result.as_dict()  # type: ignore[no-any-return]

    def ledger_read(self, until: datetime | str = "infinity") -> None:
        with data.connect(self.db) as conn:
            data.ledger_read(conn, f"{self.job}-watcher", until, tenant=self.tenant)

    def pay(self, invoice: str, amount: str, at: datetime | None = None) -> None:
        self.fake.add(memo=invoice, amount=amount, asset_code="USDC", created_at=at)

    def status(self, invoice: str) -> dict[str, Any]:
        (row,) = self.sql("SELECT status, overpaid, due_on FROM invoices WHERE id = %s", invoice)
        return row

    def webhooks(self) -> list[dict[str, Any]]:
        """What went to the dispatcher's queue for the tenant's subscription, in sequence order."""
        messages = [m for m in drain_queue(self.moto_endpoint, self.queue_url) if m["webhook_id"] == self.webhook]
        return sorted(messages, key=lambda m: m["sequence"])

    def outbox(self) -> list[dict[str, Any]]:
        return self.sql("SELECT event_type, payload FROM webhook_outbox WHERE webhook_id = %s ORDER BY event_sequence",
                        self.webhook)


@pytest.fixture
def billing(pool: ConnectionPool, pg_store: onceonly.Store, jobs_db: str, unique: str, fake_payments: FakePayments,
            moto_endpoint: str, sqs_queue: str) -> Billing:
    return Billing(pool, pg_store, jobs_db, unique, fake_payments, moto_endpoint, sqs_queue)


def only_invoice(billing: Billing, schedule: str) -> str:
    (row,) = billing.sql("SELECT id FROM invoices WHERE schedule_id = %s", schedule)
    return str(row["id"])


# -- due dates are dates --------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("first_zone", "new_zone", "issued_at", "on_the_due_day", "after_it"), [
    # from the default UTC to New York: the 14th ends at 00:00 UTC on the 15th, as promised, not at 04:00 on the 14th
    (None, "America/New_York", "2025-06-14T00:30:00Z", "2025-06-14T12:00:00Z", "2025-06-15T00:00:00Z"),
    # from Berlin to London: the 14th ends at 22:00 UTC (Berlin's midnight), not at 23:00 UTC on the 13th
    ("Europe/Berlin", "Europe/London", "2025-06-13T22:30:00Z", "2025-06-14T10:00:00Z", "2025-06-14T22:00:00Z"),
])
def test_a_zone_change_never_moves_a_promised_due_date(
        billing: Billing, first_zone: str | None, new_zone: str, issued_at: str, on_the_due_day: str,
        after_it: str) -> None:
    if first_zone:
        billing.set_zone(first_zone)
    schedule = billing.schedule(anchor=date(2025, 6, 14), due_days=0)
    assert billing.bill(issued_at) == 1
    invoice = only_invoice(billing, schedule)
    (created,) = billing.sql("SELECT body_text FROM notifications WHERE invoice_id = %s", invoice)
    assert "is due on 2025-06-14" in created["body_text"]
    billing.ledger_read()  # the watcher is up to date: only the due day decides

    billing.set_zone(new_zone)
    held = billing.dun(on_the_due_day)
    moved = billing.dun(after_it)

    assert held.transitioned == 0 and moved.transitioned == 1
    (email,) = billing.sql("SELECT body_text FROM notifications WHERE invoice_id = %s AND kind = 'invoice.overdue'",
                           invoice)
    assert "was due on 2025-06-14" in email["body_text"]
    assert billing.status(invoice)["due_on"] == date(2025, 6, 14)


def test_a_payment_on_the_promised_due_day_is_on_time_after_a_zone_change(billing: Billing) -> None:
    """Issued in UTC due 14 June; the tenant moves to New York; paid at 12:00 UTC
    on the 14th: on time (the 14th as promised), not late."""
    schedule = billing.schedule(anchor=date(2025, 6, 14), due_days=0, amount_cents=5_00)
    billing.bill("2025-06-14T00:30:00Z")
    invoice = only_invoice(billing, schedule)
    billing.set_zone("America/New_York")
    billing.pay(invoice, "5", at=datetime(2025, 6, 14, 12, tzinfo=UTC))

    result = billing.watch()

    assert (result["invoices_paid"], result["late"]) == (1, 0)
    assert billing.sql("SELECT late FROM payments WHERE invoice_id = %s", invoice) == [{"late": False}]


@pytest.mark.parametrize(("due_days", "days_late"), [(0, 1), (14, 15)])
def test_an_invoice_issued_late_is_not_born_overdue(billing: Billing, due_days: int, days_late: int) -> None:
    """The tick of the period's first day was lost: the invoice issued days later
    is due ``due_days`` after its issue day, not after its period start."""
    anchor = date(2025, 3, 1)
    schedule = billing.schedule(anchor=anchor, due_days=due_days)
    issue_day = anchor + timedelta(days=days_late)
    assert billing.bill(f"{issue_day}T00:30:00Z") == 1
    invoice = only_invoice(billing, schedule)
    billing.ledger_read()

    within_the_hour = billing.dun(f"{issue_day}T01:00:00Z")
    on_the_due_day = billing.dun(f"{issue_day + timedelta(days=due_days)}T23:00:00Z")
    after_it = billing.dun(f"{issue_day + timedelta(days=due_days + 1)}T00:00:00Z")

    assert billing.status(invoice)["due_on"] == issue_day + timedelta(days=due_days)
    assert (within_the_hour.transitioned, on_the_due_day.transitioned, after_it.transitioned) == (0, 0, 1)


def test_an_invoice_issued_on_time_is_due_from_its_period_start(billing: Billing) -> None:
    schedule = billing.schedule(anchor=date(2025, 3, 1), due_days=14)
    billing.bill("2025-03-01T00:30:00Z")
    assert billing.status(only_invoice(billing, schedule))["due_on"] == date(2025, 3, 15)


# -- schedules ------------------------------------------------------------------------------------------------------

def test_a_schedule_created_inactive_is_not_billed_for_its_inactive_spell(billing: Billing) -> None:
    today = datetime.now(UTC).date()
    anchor = (today - timedelta(days=120)).replace(day=1)  # four or five monthly periods before today
    schedule = billing.schedule(anchor=anchor, active=False)
    billing.sql("UPDATE billing_schedules SET active = true WHERE id = %s", schedule)  # switched on today

    now = billing.bill(datetime.now(UTC))
    next_month = (today.replace(day=1) + timedelta(days=32)).replace(day=1)
    later = billing.bill(f"{next_month}T00:30:00Z")

    assert now == 0 and later == 1
    assert [r["period_key"] for r in billing.sql("SELECT period_key FROM invoices WHERE schedule_id = %s",
                                                 schedule)] == [str(next_month)]
    (window,) = billing.sql("SELECT paused_on, resumed_on FROM billing_schedule_pauses WHERE schedule_id = %s",
                            schedule)
    assert window == {"paused_on": anchor, "resumed_on": today}


def test_a_schedule_created_active_opens_no_pause(billing: Billing) -> None:
    schedule = billing.schedule(anchor=date(2025, 1, 1))
    assert billing.sql("SELECT count(*) AS n FROM billing_schedule_pauses WHERE schedule_id = %s",
                       schedule) == [{"n": 0}]


# -- amount changes against what was paid ---------------------------------------------------------------------------

def partly_paid(billing: Billing, amount_cents: int = 100_00, paid: str = "60") -> str:
    with data.connect(billing.db) as conn:
        invoice = data.add_invoice(conn, billing.tenant, due_at="2099-01-01T00:00:00Z", amount_cents=amount_cents)
    billing.pay(invoice, paid)
    assert billing.watch()["partial"] == 1
    return invoice


def change_amount(billing: Billing, invoice: str, amount_cents: int) -> None:
    billing.sql("UPDATE invoices SET amount_cents = %s WHERE id = %s", amount_cents, invoice)


def test_an_amount_reduced_to_what_was_paid_settles_the_invoice_with_invoice_paid(billing: Billing) -> None:
    invoice = partly_paid(billing)
    change_amount(billing, invoice, 60_00)

    assert billing.status(invoice) == {"status": "paid", "overpaid": False, "due_on": date(2099, 1, 1)}
    (event,) = billing.outbox()
    assert event["event_type"] == "invoice.paid"
    assert {k: event["payload"][k] for k in ("amount_due", "amount_paid", "amount_remaining", "overpaid")} == {
        "amount_due": 60_00, "amount_paid": 60_00, "amount_remaining": 0, "overpaid": False}
    assert billing.sql("SELECT from_status, to_status FROM invoice_status_history WHERE invoice_id = %s",
                       invoice) == [{"from_status": "open", "to_status": "paid"}]


@pytest.mark.parametrize("reduced_to", [50_00, 0])
def test_an_amount_reduced_below_what_was_paid_is_settled_and_flagged_overpaid(
        billing: Billing, reduced_to: int) -> None:
    invoice = partly_paid(billing)
    change_amount(billing, invoice, reduced_to)

    assert billing.status(invoice)["status"] == "paid" and billing.status(invoice)["overpaid"] is True
    events = billing.outbox()
    assert [e["event_type"] for e in events] == ["invoice.paid", "payment.overpaid"]
    assert {k: events[1]["payload"][k] for k in ("amount_due", "amount_paid", "amount_remaining")} == {
        "amount_due": reduced_to, "amount_paid": 60_00, "amount_remaining": 0}
    assert billing.sql("SELECT kind FROM activity_events WHERE invoice_id = %s AND kind LIKE 'invoice.%%'"
                       " ORDER BY id", invoice) == [{"kind": "invoice.paid"}, {"kind": "invoice.overpaid"}]


def test_an_amount_still_above_what_was_paid_duns_for_the_balance(billing: Billing) -> None:
    invoice = partly_paid(billing)
    change_amount(billing, invoice, 80_00)
    billing.sql("UPDATE invoices SET due_on = '2025-01-01' WHERE id = %s", invoice)
    billing.ledger_read()

    assert billing.dun("2025-02-01T00:00:00Z").transitioned == 1

    (email,) = billing.sql("SELECT body_text FROM notifications WHERE invoice_id = %s", invoice)
    assert "20.00 USD of 80.00 USD is still due (60.00 USD received)" in email["body_text"]
    (event,) = billing.outbox()
    assert event["event_type"] == "invoice.overdue"
    assert {k: event["payload"][k] for k in ("amount_due", "amount_paid", "amount_remaining")} == {
        "amount_due": 80_00, "amount_paid": 60_00, "amount_remaining": 20_00}


# -- exact amounts, end to end --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("amount_cents", "payments"), [
    (110, ["1.1"]),  # 1.1 * 100 is 110.00000000000001 as a float
    (1005, ["10.05"]),  # 1005.0000000000001
    (30, ["0.1", "0.2"]),  # 0.1 + 0.2 is 0.30000000000000004
    (29, ["0.29"]),  # 28.999999999999996: a float would leave the invoice short
])
def test_amounts_a_float_cannot_carry_settle_exactly(billing: Billing, amount_cents: int, payments: list[str]) -> None:
    with data.connect(billing.db) as conn:
        invoice = data.add_invoice(conn, billing.tenant, due_at="2099-01-01T00:00:00Z", amount_cents=amount_cents)
    for amount in payments:
        billing.pay(invoice, amount)

    result = billing.watch()

    assert (result["invoices_paid"], result["overpaid"]) == (1, 0)
    assert billing.status(invoice)["status"] == "paid" and billing.status(invoice)["overpaid"] is False
    assert billing.sql("SELECT outcome FROM payments WHERE invoice_id = %s ORDER BY paging_token::numeric",
                       invoice)[-1] == {"outcome": "settled"}
    (paid,) = [e for e in billing.outbox() if e["event_type"] == "invoice.paid"]
    assert (paid["payload"]["amount_paid"], paid["payload"]["amount_remaining"]) == (amount_cents, 0)


# -- what merchants hear --------------------------------------------------------------------------------------------

def test_a_memo_with_other_case_and_spaces_pays_its_invoice(billing: Billing) -> None:
    invoice = new_id("inv")
    with data.connect(billing.db) as conn:
        data.add_invoice(conn, billing.tenant, due_at="2099-01-01T00:00:00Z", amount_cents=5_00, invoice_id=invoice)
    billing.fake.add(memo=f"{invoice.upper()} ", amount="5", asset_code="USDC")

    result = billing.watch()

    assert (result["invoices_paid"], result["unmatched"]) == (1, 0)
    assert billing.status(invoice)["status"] == "paid"


@pytest.mark.parametrize(("memo", "asset", "currency", "reason"), [
    ("inv_nobodys", "USDC", "USD", "unknown_invoice"),
    (None, "USDC", "USD", "no_memo"),
    ("INVOICE", "XYZ", "USD", "asset_not_accepted"),
    ("INVOICE", "USDC", "EUR", "wrong_currency"),
])
def test_an_unmatched_payment_reaches_the_merchant_with_its_reason(
        billing: Billing, memo: str | None, asset: str, currency: str, reason: str) -> None:
    with data.connect(billing.db) as conn:
        invoice = data.add_invoice(conn, billing.tenant, due_at="2099-01-01T00:00:00Z", amount_cents=5_00,
                                   currency=currency)
    billing.fake.add(memo=invoice if memo == "INVOICE" else memo, amount="5", asset_code=asset)

    assert billing.watch()["unmatched"] == 1
    billing.watch()  # a second run sends nothing again

    (event,) = billing.webhooks()
    assert event["event_type"] == "payment.unmatched"
    assert (event["payload"]["reason"], event["payload"]["amount"], event["payload"]["tenant_id"]) == (
        reason, "5.0000000", billing.tenant)


def test_an_overpayment_reaches_the_merchant_as_payment_overpaid(billing: Billing) -> None:
    with data.connect(billing.db) as conn:
        invoice = data.add_invoice(conn, billing.tenant, due_at="2099-01-01T00:00:00Z", amount_cents=5_00)
    billing.pay(invoice, "5.0000001")

    assert billing.watch()["overpaid"] == 1

    events = billing.webhooks()
    assert [e["event_type"] for e in events] == ["invoice.paid", "payment.overpaid"]
    assert events[0]["payload"]["overpaid"] is True and events[0]["payload"]["amount_remaining"] == 0
    assert events[1]["payload"]["invoice_id"] == invoice and events[1]["payload"]["amount"] == "5.0000001"
    assert billing.status(invoice)["overpaid"] is True


def test_a_subscription_filter_keeps_the_new_events_out(billing: Billing) -> None:
    billing.sql("UPDATE webhook_subscriptions SET event_types = ARRAY['invoice.paid'] WHERE id = %s", billing.webhook)
    billing.fake.add(memo="inv_nobodys", amount="5", asset_code="USDC")
    assert billing.watch()["unmatched"] == 1
    assert billing.webhooks() == []


def test_an_invoice_id_a_memo_cannot_carry_is_refused_at_creation(billing: Billing) -> None:
    with data.connect(billing.db) as conn:
        data.add_invoice(conn, billing.tenant, due_at="2099-01-01T00:00:00Z", invoice_id="i" * 28)  # fits
        with pytest.raises(psycopg.errors.CheckViolation, match="invoices_id_fits_a_memo"):
            data.add_invoice(conn, billing.tenant, due_at="2099-01-01T00:00:00Z", invoice_id="é" * 15)  # 30 bytes


# -- the ledger position is what the source ingested ----------------------------------------------------------------

def test_a_stalled_feed_never_duns_and_its_lag_is_reported(billing: Billing) -> None:
    """The payments API is up, answers "nothing new" with a current Date, but
    its ingestion stalled before the due day ended; the customer paid on the
    due day. The invoice is held (and counted), not dunned; once ingestion
    resumes the payment is seen, on time."""
    now = datetime.now(UTC).replace(microsecond=0)
    due_on = (now - timedelta(days=1)).date()
    day_start = datetime.combine(due_on, datetime.min.time(), UTC)
    with data.connect(billing.db) as conn:
        invoice = data.add_invoice(conn, billing.tenant, due_at=day_start, amount_cents=10_00)
    billing.fake.stalled_at = day_start + timedelta(hours=12)
    billing.pay(invoice, "10", at=day_start + timedelta(hours=20))  # on the due day, not ingested yet

    stalled = billing.watch()
    held = billing.dun(now)

    assert stalled["payments_applied"] == 0 and stalled["feed_lag_seconds"] > 11 * 3600
    assert (held.transitioned, held.held) == (0, 1)
    assert billing.status(invoice)["status"] == "open"
    billing.fake.stalled_at = None
    caught_up = billing.watch()
    assert (caught_up["invoices_paid"], caught_up["late"]) == (1, 0) and caught_up["feed_lag_seconds"] < 5
    assert billing.dun(now + timedelta(hours=1)).transitioned == 0
    assert billing.sql("SELECT count(*) AS n FROM notifications WHERE invoice_id = %s AND kind = 'invoice.overdue'",
                       invoice) == [{"n": 0}]


def test_an_up_to_date_feed_duns_what_is_past_due_and_counts_nothing_held(billing: Billing) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    with data.connect(billing.db) as conn:
        invoice = data.add_invoice(conn, billing.tenant, due_at=now - timedelta(days=3), amount_cents=10_00)
    billing.watch()
    run = billing.dun(now - timedelta(seconds=2))  # the watcher read up to about now
    assert (run.transitioned, run.held) == (1, 0) and billing.status(invoice)["status"] == "overdue"


def test_a_due_day_that_just_ended_is_held_but_not_counted(billing: Billing) -> None:
    """The hourly run right after midnight: an up-to-date watcher has read to a
    few seconds before it. Held (the next run moves it), not a lagging feed."""
    with data.connect(billing.db) as conn:
        invoice = data.add_invoice(conn, billing.tenant, due_at="2026-06-14T00:00:00Z")
    billing.ledger_read("2026-06-14T23:59:55Z")
    at_midnight = billing.dun("2026-06-15T00:00:00Z")
    assert (at_midnight.transitioned, at_midnight.held) == (0, 0) and billing.status(invoice)["status"] == "open"
    billing.ledger_read("2026-06-15T00:59:55Z")
    assert billing.dun("2026-06-15T01:00:00Z").transitioned == 1


def test_each_receiving_account_is_its_own_feed_and_hold(billing: Billing) -> None:
    """A tenant with two receiving accounts is dunned only once BOTH feeds have
    read past the due day: the payment to the second account is seen on its
    own feed, and its invoice is paid, not dunned."""
    second = random_account()
    with data.connect(billing.db) as conn:
        data.add_receiving_account(conn, billing.tenant, second)
        paid_on_the_second = data.add_invoice(conn, billing.tenant, due_at="2026-06-14T00:00:00Z", amount_cents=3_00)
        unpaid = data.add_invoice(conn, billing.tenant, due_at="2026-06-14T00:00:00Z", amount_cents=3_00)
    billing.fake.add(memo=paid_on_the_second, amount="3", asset_code="USDC", to=second,
                     created_at=datetime(2026, 6, 14, 12, tzinfo=UTC))
    first_feed = payment_watcher.cursor_name(f"{billing.job}-watcher", billing.fake.receiver)
    billing.sql("INSERT INTO payment_cursors (poller, cursor, fence_token, ledger_read_to)"
                " VALUES (%s, '', 0, 'infinity')", first_feed)  # the first account's feed is read to its end

    only_one_feed = billing.dun("2026-06-16T00:00:00Z")
    result = billing.watch()
    both = billing.dun("2026-06-16T01:00:00Z")

    assert (only_one_feed.transitioned, only_one_feed.held) == (0, 2)
    assert result["feeds"] == 2 and result["invoices_paid"] == 1
    assert both.transitioned == 1
    assert [billing.status(i)["status"] for i in (paid_on_the_second, unpaid)] == ["paid", "overdue"]


def test_a_tenant_with_no_feed_is_held_never_dunned_blind(billing: Billing, jobs_db: str, unique: str) -> None:
    no_account = f"tenant-nofeed-{unique}"
    with data.connect(jobs_db) as conn:
        invoice = data.add_invoice(conn, no_account, due_at="2026-06-01T00:00:00Z")
    billing.ledger_read()  # every feed there is has been read to its end
    run = billing._tick("overdue-nofeed", "2026-06-16T00:00:00Z", lambda t: overdue.run(
        billing.pool, t, watcher=f"{billing.job}-watcher", tenant=no_account))
    assert (run.transitioned, run.held) == (0, 1)
    assert billing.sql("SELECT status FROM invoices WHERE id = %s", invoice) == [{"status": "open"}]
