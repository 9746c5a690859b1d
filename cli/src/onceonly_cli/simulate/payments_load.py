"""The payment-watcher part of the simulation: payments in the fake payments
API for the invoices of every tenant, the watcher's ticks, and afterwards the
checks that each payment operation was applied once and that each invoice it
paid was announced once to every subscription of its tenant.

Each tenant has a receiving account of its own. Per tenant the API holds:
- credited payments: overdue invoices paid in full (late) or in half (partial),
  an invoice paid in two transactions, one paid by ONE transaction of three
  payment operations, and one by a transaction that also carries an operation
  in an asset code nobody accepts, from the right issuer (that operation alone
  is unmatched);
- payments that must not be credited, each aimed at an invoice of its own that
  must stay unpaid: the native asset, the right code from another issuer, the
  other currency's accepted asset, a memo naming another tenant's invoice (paid
  to this tenant's account), a payment to an account that is not ours (skipped,
  not even recorded); and a memo that names no invoice at all;
- what merchants must hear of: an overpayment (one stroop more than due: the
  invoice is paid and flagged overpaid, with a payment.overpaid event), a memo
  in upper case with spaces around it (it pays its invoice), and a partial
  payment whose invoice's amount is then reduced to what was paid, before the
  overdue run (the change settles it, with invoice.paid).

And the money edge cases: the sub-cent invoice is paid by parts of
fractions of a cent that add up exactly (5.005 + 2.5025 + 2.5025 = 10.01), on
time; the outage invoice is paid in full on its due day, ten minutes before
the day ends.

The payments are all in the API before the watcher's first tick, each at its
ledger time: the credited ones above now, the scenarios' on time (and the
partial payment of the amount change two days before the last overdue tick).
For the watcher's first tick the API is up, with a current Date, but its
ingestion LAGS: it stalled at the day before the last overdue tick's, so the
watcher reads the ledger only that far (the sub-cent payments and the amount
change's, not the outage's), and the invoices due since are held, not dunned.
Then the API is down for the overdue and recurring runs, and back, caught up,
for the watcher's later ticks. Whichever run polls first applies them; a run killed mid-poll
leaves its tick unfinished, so a retry of that tick polls the rest. The poller
lease is shorter than the tick lease, so a tick's retry never finds the poller
still held by its own dead run."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg

from ..testing.fake_payments import random_account
from .billing_checks import due_day_end
from .billing_load import SeededInvoice
from .loadgen import CronJob
from .payment_checks import SeededPayment
from .report import EffectCheck
from .tenants import Tenant

PAGE_LIMIT = 4  # small pages, so the cursor moves several times per poll
POLLER_LEASE_SECONDS = "1.5"  # below TICK_LEASE_SECONDS (2)
JOB = "payment-watcher"
FUNCTION = "PaymentWatcherFunction"
ASSET_CODES = {"USD": "USD", "EUR": "EURC"}  # the accepted asset code of each currency (the fake's issuer)
MULTI_OP_PARTS = 3
SUB_CENT_PARTS = (Decimal("500.5"), Decimal("250.25"), Decimal("250.25"))  # cents: 10.01 of its invoice
# One payment operation: cents (exact), its asset ("CODE", "CODE:ISSUER", None for the
# native asset), and None if it is credited, else why not ("skipped": not ours).
Op = tuple[Decimal | int, str | None, str | None]

RECEIVING_ACCOUNT = "INSERT INTO payment_accounts (account_id, tenant_id) VALUES (%s, %s)"
COUNTS = {
    "payment operations recorded": "SELECT count(*) FROM payments WHERE payment_id = ANY(%(payments)s)",
    "invoices paid": "SELECT count(*) FROM invoices WHERE id = ANY(%(paid)s) AND status = 'paid'",
    "paid history rows": """SELECT count(*) FROM invoice_status_history
                             WHERE invoice_id = ANY(%(invoices)s) AND to_status = 'paid'""",
    "invoice.paid activity events": """SELECT count(*) FROM activity_events
                                        WHERE invoice_id = ANY(%(invoices)s) AND kind = 'invoice.paid'""",
    "invoice.paid outbox rows": """SELECT count(*) FROM webhook_outbox
                                    WHERE webhook_id = ANY(%(subscriptions)s) AND event_type = 'invoice.paid'""",
    "invoices flagged overpaid": "SELECT count(*) FROM invoices WHERE id = ANY(%(paid)s) AND overpaid",
}
CHANGE_AMOUNT = "UPDATE invoices SET amount_cents = %s WHERE id = %s"


@dataclass
class PaymentsLoad:
    tenants: list[Tenant]
    rng: random.Random
    tick_times: list[datetime]
    payments: list[SeededPayment] = field(default_factory=list)
    subscriptions: dict[str, list[str]] = field(default_factory=dict)  # tenant -> its subscription ids
    accounts: dict[str, str] = field(default_factory=dict)  # tenant -> its receiving account
    baits: dict[str, str] = field(default_factory=dict)  # invoice id -> the bad payment aimed at it
    accepted_assets: str = ""  # PAYMENTS_ACCEPTED_ASSETS: the fake API's USD and EURC
    issuer: str = ""
    fake: Any = None
    overpaid: list[str] = field(default_factory=list)  # invoices paid one stroop over
    amount_changes: dict[str, int] = field(default_factory=dict)  # invoice -> the amount it is reduced to
    database_url: str = ""

    def seed(self, database_url: str, fake: Any, invoices: list[SeededInvoice],
             subscriptions: dict[str, list[str]]) -> int:
        """Add the payments to the fake API (``FakePayments``); returns how many
        overdue invoices they pay (those end `paid`, not `overdue`). The run's
        database is fresh, so the watcher starts with no cursor."""
        self.fake, self.issuer, self.database_url = fake, fake.issuer, database_url
        self.accepted_assets = " ".join(f"{currency}={code}:{fake.issuer}" for currency, code in ASSET_CODES.items())
        self.subscriptions = {tenant: list(ids) for tenant, ids in subscriptions.items()}
        with psycopg.connect(database_url) as conn:
            for tenant in self.tenants:
                self.accounts[tenant.id] = random_account()
                conn.execute(RECEIVING_ACCOUNT, (self.accounts[tenant.id], tenant.id))
        for kind in ("sub-cent", "outage"):  # first, as their ledger times are the earliest
            for tenant in self.tenants:
                self._seed_on_time(fake, next(i for i in invoices if i.tenant == tenant and i.kind == kind))
        paid_overdue = 0
        for n, tenant in enumerate(self.tenants):
            mine = [i for i in invoices if i.tenant == tenant]
            overdue = self.rng.sample([i for i in mine if i.kind == "overdue"], 6)
            not_due = self.rng.sample([i for i in mine if i.kind == "not due"], 8)
            neighbour = self.tenants[(n + 1) % len(self.tenants)]
            paid_overdue += self._seed_tenant(fake, tenant, neighbour, overdue, not_due[:5])
            self._seed_merchant_cases(fake, tenant, not_due[5:], invoices_due_by=max(self.tick_times))
        return paid_overdue

    def _seed_merchant_cases(self, fake: Any, tenant: Tenant, invoices: list[SeededInvoice], *,
                             invoices_due_by: datetime) -> None:
        """An overpayment, a memo a customer typed (upper case, spaces), and a
        partial payment whose invoice is then reduced to it (change_amounts)."""
        over, typed, reduced = invoices
        account, code = self.accounts[tenant.id], ASSET_CODES[tenant.currency]
        self._pay(fake, over, [(over.amount_cents + Decimal("0.00001"), code, None)], account, pays=over.id)
        self.overpaid.append(over.id)
        self._add(fake, f" {typed.id.upper()} ", [(typed.amount_cents, code, None)], account, tenant.id, typed.id)
        half = reduced.amount_cents // 2
        self._pay(fake, reduced, [(half, code, None)], account, created_at=invoices_due_by - timedelta(days=2))
        self.amount_changes[reduced.id] = half

    def change_amounts(self) -> None:
        """Reduce each amount-change invoice to what was paid of it: the change
        itself settles it (the watcher applied the partial payment already)."""
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            for invoice, cents in self.amount_changes.items():
                conn.execute(CHANGE_AMOUNT, (cents, invoice))

    def _seed_on_time(self, fake: Any, invoice: SeededInvoice) -> None:
        """A scenario's payment, before its invoice's due day ended: the sub-cent
        parts two hours before, the outage's ten minutes before."""
        tenant = invoice.tenant
        account, code = self.accounts[tenant.id], ASSET_CODES[tenant.currency]
        parts = SUB_CENT_PARTS if invoice.kind == "sub-cent" else (invoice.amount_cents,)
        early = timedelta(hours=2) if invoice.kind == "sub-cent" else timedelta(minutes=10)
        self._pay(fake, invoice, [(cents, code, None) for cents in parts], account, pays=invoice.id,
                  created_at=due_day_end(invoice.due_at, tenant.time_zone) - early)

    def _seed_tenant(self, fake: Any, tenant: Tenant, neighbour: Tenant, overdue: list[SeededInvoice],
                     not_due: list[SeededInvoice]) -> int:
        """One tenant's payments (the module docstring lists them); returns how
        many of its overdue invoices they pay in full."""
        full_1, full_2, half, native, foreign_issuer, foreign_account = overdue
        three_ops, two_txs, mixed, cross_tenant, wrong_currency = not_due
        account, code = self.accounts[tenant.id], ASSET_CODES[tenant.currency]
        paid_in_full = (full_1, full_2)
        for invoice in paid_in_full:
            self._pay(fake, invoice, [(invoice.amount_cents, code, None)], account, pays=invoice.id)
        self._pay(fake, half, [(half.amount_cents // 2, code, None)], account)
        parts = [three_ops.amount_cents // MULTI_OP_PARTS] * MULTI_OP_PARTS
        self._pay(fake, three_ops, [(cents, code, None) for cents in parts], account, pays=three_ops.id)
        first_half = two_txs.amount_cents // 2
        self._pay(fake, two_txs, [(first_half, code, None)], account)
        self._pay(fake, two_txs, [(two_txs.amount_cents - first_half, code, None)], account, pays=two_txs.id)
        # The second operation: our issuer, a code nobody accepts.
        self._pay(fake, mixed, [(mixed.amount_cents, code, None), (mixed.amount_cents, f"{code}X",
                                                                    "asset_not_accepted")], account, pays=mixed.id)
        # Each of these must leave its invoice unpaid.
        self._bait(fake, native, [(native.amount_cents, None, "asset_not_accepted")], account, tenant.id)
        self._bait(fake, foreign_issuer, [(foreign_issuer.amount_cents, f"{code}:{random_account()}",
                                           "asset_not_accepted")], account, tenant.id)
        other_code = next(c for currency, c in ASSET_CODES.items() if currency != tenant.currency)
        self._bait(fake, wrong_currency, [(wrong_currency.amount_cents, other_code, "wrong_currency")], account,
                   tenant.id)
        # To the neighbour's account: matched against the neighbour's invoices only.
        self._bait(fake, cross_tenant, [(cross_tenant.amount_cents, code, "unknown_invoice")],
                   self.accounts[neighbour.id], recorded_for=neighbour.id)
        self._bait(fake, foreign_account, [(foreign_account.amount_cents, code, "skipped")], random_account(),
                   recorded_for=None)
        self._add(fake, f"inv_{tenant.id}_unknown", [(1234, code, "unknown_invoice")], account, tenant.id, None)
        return len(paid_in_full)

    def _pay(self, fake: Any, invoice: SeededInvoice, ops: list[Op], account: str,
             pays: str | None = None, created_at: datetime | None = None) -> None:
        self._add(fake, invoice.id, ops, account, invoice.tenant.id, pays, created_at)

    def _bait(self, fake: Any, invoice: SeededInvoice, ops: list[Op], account: str, recorded_for: str | None) -> None:
        self.baits[invoice.id] = str(ops[0][2])
        self._add(fake, invoice.id, ops, account, recorded_for, None)

    def _add(self, fake: Any, memo: str, ops: list[Op], account: str, tenant: str | None, pays: str | None,
             created_at: datetime | None = None) -> None:
        """One transaction of ``ops`` to ``account``. ``tenant``: whose payments
        rows they become (None: the account is not ours, they are skipped);
        ``pays``: the invoice its last credited operation completes."""
        tx = hashlib.sha256(f"{memo}:{len(self.payments)}".encode()).hexdigest()
        operations = []
        for cents, asset, _ in ops:
            code, _, issuer = (asset or "").partition(":")
            operations.append(fake.payment(Decimal(cents) / 100, asset_code=code or None,
                                           asset_issuer=issuer or (self.issuer if code else None), to=account))
        records = fake.add_transaction(operations, memo=memo, transaction_hash=tx, created_at=created_at)
        completing = max((k for k, op in enumerate(ops) if op[2] is None), default=None) if pays else None
        for k, ((cents, _, reason), record) in enumerate(zip(ops, records, strict=True)):
            self.payments.append(SeededPayment(str(record["id"]), tx, memo, cents, tenant, reason, len(ops),
                                               pays if k == completing else None))

    @property
    def accepted(self) -> dict[str, tuple[str, str]]:
        """Currency -> the asset (code, issuer) that pays it."""
        return {currency: (code, self.issuer) for currency, code in ASSET_CODES.items()}

    @property
    def paid_invoices(self) -> dict[str, str]:
        """Invoice id -> its tenant, of the invoices the payments (or a change
        of amount to what was paid) pay in full."""
        by_payment = {p.pays: str(p.tenant) for p in self.payments if p.pays}
        by_change = {p.memo: str(p.tenant) for p in self.payments if p.memo in self.amount_changes}
        return {**by_payment, **by_change}

    def expected_deliveries(self) -> set[str]:
        """One ``invoice.paid`` delivery per (paid invoice, subscription of its
        tenant): the event id comes from the invoice."""
        from onceonly_app.events.types import invoice_paid_event_id
        from onceonly_app.webhooks.deliveries import delivery_id_for

        return {delivery_id_for(sub, invoice_paid_event_id(invoice))
                for invoice, tenant in self.paid_invoices.items() for sub in self.subscriptions.get(tenant, [])}

    def env(self, api_url: str, queue_url: str) -> dict[str, str]:
        return {"PAYMENTS_API_URL": api_url, "WEBHOOK_QUEUE_URL": queue_url,
                "PAYMENTS_ACCEPTED_ASSETS": self.accepted_assets,
                "POLLER_LEASE_SECONDS": POLLER_LEASE_SECONDS, "PAYMENTS_PAGE_LIMIT": str(PAGE_LIMIT)}

    def cron_jobs(self, last_overdue_tick: datetime) -> tuple[CronJob, CronJob, Callable[[], None]]:
        """The watcher's first tick (reading the ledger up to the day before
        the last overdue tick's), its later ticks (the whole ledger, after the
        outage), and what starts the outage (BillingLoad.cron_jobs)."""
        def read_to_the_day_before() -> None:
            self.fake.stalled_at = last_overdue_tick - timedelta(days=1)  # a lagging source, its Date current

        def outage() -> None:
            self.change_amounts()  # after the partial payments were read, before the overdue run
            self.fake.down = True

        def outage_over() -> None:
            self.change_amounts()  # again (a no-op if done): the overdue and recurring jobs may be absent
            self.fake.down, self.fake.stalled_at = False, None

        return (CronJob(FUNCTION, JOB, self.tick_times[:1], before=read_to_the_day_before),
                CronJob(FUNCTION, JOB, self.tick_times[1:], before=outage_over), outage)

    def effects(self, conn: psycopg.Connection[Any]) -> list[EffectCheck]:
        paid = self.paid_invoices
        expected = {"payment operations recorded": sum(1 for p in self.payments if p.tenant is not None),
                    "invoices paid": len(paid), "paid history rows": len(paid),
                    "invoice.paid activity events": len(paid),
                    "invoice.paid outbox rows": sum(len(self.subscriptions.get(t, [])) for t in paid.values()),
                    "invoices flagged overpaid": len(self.overpaid)}
        params = {"payments": [p.payment_id for p in self.payments], "paid": sorted(paid),
                  "invoices": sorted({p.memo for p in self.payments} | set(paid)),
                  "subscriptions": [s for ids in self.subscriptions.values() for s in ids]}
        checks = []
        for what, count in expected.items():
            row = conn.execute(COUNTS[what], params).fetchone()  # type: ignore[arg-type]
            checks.append(EffectCheck(JOB, what, count, int(row[0]) if row else -1))
        return checks
