"""The payment-watcher part of the simulation: payments in the fake payments
API for some of the run's invoices, the watcher's ticks, and afterwards the
checks that each payment was applied once and that each invoice it paid was
announced once to every subscription.

The payments are all in the API before the watcher's first tick. Whichever run
polls first applies them; a run killed mid-poll leaves its tick unfinished, so a
retry of that tick polls the rest. The poller lease is shorter than the tick
lease, so a tick's retry never finds the poller still held by its own dead run."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg

from .billing_load import SeededInvoice
from .loadgen import CronJob
from .report import EffectCheck

FULLY_PAID_OVERDUE = 4  # one payment each
PAID_IN_TWO_PARTS = 2  # not yet due; two half payments each, the second one pays the invoice
PARTLY_PAID = 1  # overdue; half paid, stays overdue, no event
UNMATCHED = 1  # a memo that names no invoice: recorded, nothing paid
PAGE_LIMIT = 4  # small pages, so the cursor moves several times per poll
POLLER_LEASE_SECONDS = "1.5"  # below TICK_LEASE_SECONDS (2)
JOB = "payment-watcher"
FUNCTION = "PaymentWatcherFunction"

RECEIVING_ACCOUNT = "INSERT INTO payment_accounts (account_id, tenant_id) VALUES (%s, %s)"
COUNTS = {
    "payments applied": "SELECT count(*) FROM payments WHERE transaction_hash = ANY(%(hashes)s)",
    "invoices paid": "SELECT count(*) FROM invoices WHERE id = ANY(%(invoices)s) AND status = 'paid'",
    "paid history rows": """SELECT count(*) FROM invoice_status_history
                             WHERE invoice_id = ANY(%(invoices)s) AND to_status = 'paid'""",
    "invoice.paid activity events": """SELECT count(*) FROM activity_events
                                        WHERE invoice_id = ANY(%(invoices)s) AND kind = 'invoice.paid'""",
    "invoice.paid outbox rows": """SELECT count(*) FROM webhook_outbox
                                    WHERE webhook_id = ANY(%(subscriptions)s) AND event_type = 'invoice.paid'
                                      AND tenant_id = %(tenant)s""",
}


@dataclass(frozen=True)
class SeededPayment:
    transaction_hash: str
    memo: str
    amount_cents: int
    pays: str | None  # the invoice this payment completes, if any


@dataclass
class PaymentsLoad:
    tenant: str
    rng: random.Random
    tick_times: list[datetime]
    payments: list[SeededPayment] = field(default_factory=list)
    subscription_ids: list[str] = field(default_factory=list)
    accepted_assets: str = ""  # PAYMENTS_ACCEPTED_ASSETS: the fake API's USD

    def seed(self, database_url: str, fake: Any, invoices: list[SeededInvoice], subscription_ids: list[str]) -> int:
        """Add the payments to the fake API (``FakePayments``); returns how many
        overdue invoices they pay (those end `paid`, not `overdue`). The run's
        database is fresh, so the watcher starts with no cursor."""
        with psycopg.connect(database_url) as conn:
            conn.execute(RECEIVING_ACCOUNT, (fake.receiver, self.tenant))
        self.accepted_assets = f"USD=USD:{fake.issuer}"
        self.subscription_ids = list(subscription_ids)
        overdue = [i for i in invoices if i.overdue]
        not_due = [i for i in invoices if not i.overdue]
        picked = self.rng.sample(overdue, FULLY_PAID_OVERDUE + PARTLY_PAID)
        full, partial = picked[:FULLY_PAID_OVERDUE], picked[FULLY_PAID_OVERDUE:]
        for invoice in full:
            self._add(fake, invoice.id, invoice.amount_cents, pays=invoice.id)
        for invoice in self.rng.sample(not_due, PAID_IN_TWO_PARTS):
            half = invoice.amount_cents // 2
            self._add(fake, invoice.id, half, pays=None)
            self._add(fake, invoice.id, invoice.amount_cents - half, pays=invoice.id)
        for invoice in partial:
            self._add(fake, invoice.id, invoice.amount_cents // 2, pays=None)
        for _ in range(UNMATCHED):
            self._add(fake, f"inv_{self.tenant}_unknown", 1234, pays=None)
        return len(full)

    def _add(self, fake: Any, memo: str, cents: int, pays: str | None) -> None:
        n = len(self.payments)
        tx = hashlib.sha256(f"{self.tenant}:payment:{n}".encode()).hexdigest()
        fake.add(memo=memo, amount=Decimal(cents) / 100, transaction_hash=tx)
        self.payments.append(SeededPayment(tx, memo, cents, pays))

    @property
    def paid_invoices(self) -> list[str]:
        return [p.pays for p in self.payments if p.pays]

    def expected_deliveries(self) -> set[str]:
        """One ``invoice.paid`` delivery per (subscription, paid invoice): the
        event id comes from the invoice."""
        from onceonly_app.billing.webhook_events import invoice_paid_event_id
        from onceonly_app.webhooks.deliveries import delivery_id_for

        return {delivery_id_for(sub, invoice_paid_event_id(p.pays))
                for p in self.payments if p.pays for sub in self.subscription_ids}

    def env(self, api_url: str, queue_url: str) -> dict[str, str]:
        return {"PAYMENTS_API_URL": api_url, "WEBHOOK_QUEUE_URL": queue_url,
                "PAYMENTS_ACCEPTED_ASSETS": self.accepted_assets,
                "POLLER_LEASE_SECONDS": POLLER_LEASE_SECONDS, "PAYMENTS_PAGE_LIMIT": str(PAGE_LIMIT)}

    def cron_job(self) -> CronJob:
        return CronJob(FUNCTION, JOB, self.tick_times)

    def effects(self, conn: psycopg.Connection[Any]) -> list[EffectCheck]:
        paid = len(self.paid_invoices)
        expected = {"payments applied": len(self.payments), "invoices paid": paid, "paid history rows": paid,
                    "invoice.paid activity events": paid,
                    "invoice.paid outbox rows": paid * len(self.subscription_ids)}
        params = {"hashes": [p.transaction_hash for p in self.payments], "tenant": self.tenant,
                  "invoices": sorted({p.memo for p in self.payments}), "subscriptions": self.subscription_ids}
        checks = []
        for what, count in expected.items():
            row = conn.execute(COUNTS[what], params).fetchone()  # type: ignore[arg-type]
            checks.append(EffectCheck(JOB, what, count, int(row[0]) if row else -1))
        return checks
