"""The scheduled-jobs half of the simulation: one tenant's invoices and
recurring schedules, the ticks each job gets, and afterwards the effects
counted in the database against what exactly one run per tick must produce.

Each job's ticks are the last times its schedule fired (schedule.py); the
run's own database and store (run_scope.py) keep runs apart. The rows are still
scoped to the run's tenant (TENANT_VAR: each replica applies it with
onceonly_cli.job_scope before loading the handlers)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg

from .loadgen import CronJob
from .replica import TENANT_VAR
from .report import EffectCheck

OVERDUE_INVOICES = 12
NOT_YET_DUE_INVOICES = 4
SCHEDULES = 3
TICKS_PER_JOB = 2  # the last two times each job's schedule fired
OVERDUE_JOB, RECURRING_JOB = "overdue-invoices", "recurring-billing"
SES_FROM = "billing@onceonly.invalid"

INSERT_INVOICE = """
INSERT INTO invoices (id, tenant_id, customer_email, amount_cents, status, due_at)
VALUES (%s, %s, %s, %s, 'open', %s)"""
INSERT_SCHEDULE = """
INSERT INTO billing_schedules (id, tenant_id, customer_email, amount_cents, cadence, anchor)
VALUES (%s, %s, %s, %s, 'daily', %s)"""
COUNTS = {
    "invoices overdue at the end": "SELECT count(*) FROM invoices WHERE tenant_id = %s AND status = 'overdue'",
    "overdue history rows": """SELECT count(*) FROM invoice_status_history h JOIN invoices i ON i.id = h.invoice_id
                                WHERE i.tenant_id = %s AND h.to_status = 'overdue'""",
    "overdue activity events": "SELECT count(*) FROM activity_events WHERE tenant_id = %s AND kind = 'invoice.overdue'",
    "invoices generated": "SELECT count(*) FROM invoices WHERE tenant_id = %s AND schedule_id IS NOT NULL",
    "invoice.created events": "SELECT count(*) FROM activity_events WHERE tenant_id = %s AND kind = 'invoice.created'",
    "e-mails queued": "SELECT count(*) FROM notifications WHERE tenant_id = %s",
    "e-mails sent": "SELECT count(*) FROM notifications WHERE tenant_id = %s AND status = 'sent'",
}
JOB_OF = {
    "invoices overdue at the end": "overdue-invoices", "overdue history rows": "overdue-invoices",
    "overdue activity events": "overdue-invoices", "invoices generated": "recurring-billing",
    "invoice.created events": "recurring-billing", "e-mails queued": "overdue + recurring",
    "e-mails sent": "notifications",
}


def _midnight(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class SeededInvoice:
    id: str
    amount_cents: int
    overdue: bool  # past due at the first tick: the overdue job moves it


def run_tenant(run_id: str) -> str:
    """The run's tenant: its invoices, schedules and webhook subscriptions."""
    return f"sim-{run_id}"


@dataclass
class BillingLoad:
    run_id: str
    rng: random.Random
    jobs: dict[str, str]  # logical id -> job name, of the jobs present
    ticks: dict[str, list[datetime]]  # job name -> its ticks, oldest first
    tenant: str = ""
    expected: dict[str, int] = field(default_factory=dict)
    invoices: list[SeededInvoice] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tenant = run_tenant(self.run_id)

    def env(self) -> dict[str, str]:
        return {
            TENANT_VAR: self.tenant,
            "TICK_LEASE_SECONDS": "2",  # a crashed run's tick is taken over this soon
            "NOTIFICATION_CLAIM_SECONDS": "1.5",  # must run out before the tick's takeover
            "SES_FROM_ADDRESS": SES_FROM,
        }

    def cron_jobs(self) -> list[CronJob]:
        # Order matters: e-mails are sent after the jobs that queue them ran.
        order = ["OverdueInvoicesFunction", "RecurringBillingFunction", "NotificationsFunction"]
        return [CronJob(fid, self.jobs[fid], self.ticks[self.jobs[fid]]) for fid in order if fid in self.jobs]

    def seed(self, database_url: str) -> None:
        overdue_ticks, billing_ticks = self.ticks[OVERDUE_JOB], self.ticks[RECURRING_JOB]
        with psycopg.connect(database_url) as conn:
            for i in range(OVERDUE_INVOICES + NOT_YET_DUE_INVOICES):
                overdue = i < OVERDUE_INVOICES
                # overdue: due on a day (UTC) that ended before the first tick
                due = _midnight(overdue_ticks[0]) - timedelta(hours=self.rng.randint(1, 214)) if overdue else \
                    overdue_ticks[-1] + timedelta(days=30)
                invoice = SeededInvoice(f"inv_{self.tenant}_{i}", 1000 + i, overdue)
                conn.execute(INSERT_INVOICE, (invoice.id, self.tenant, f"c{i}@example.com", invoice.amount_cents,
                                              due))
                self.invoices.append(invoice)
            generated = 0
            for s in range(SCHEDULES):
                missed = self.rng.randint(1, 4)  # periods already due at the first tick
                anchor = billing_ticks[0].date() - timedelta(days=missed - 1)
                conn.execute(INSERT_SCHEDULE, (f"sch_{self.tenant}_{s}", self.tenant, f"s{s}@example.com",
                                               500 + s, anchor))
                generated += (billing_ticks[-1].date() - anchor).days + 1
        has = self.jobs.values()
        overdue_count = OVERDUE_INVOICES if "overdue-invoices" in has else 0
        generated = generated if "recurring-billing" in has else 0
        self.expected = {
            "invoices overdue at the end": overdue_count, "overdue history rows": overdue_count,
            "overdue activity events": overdue_count, "invoices generated": generated,
            "invoice.created events": generated, "e-mails queued": overdue_count + generated,
        }
        if "notifications" in has:
            self.expected["e-mails sent"] = overdue_count + generated

    def expect_paid_after_overdue(self, count: int) -> None:
        """``count`` overdue invoices get paid later in the run: they end `paid`,
        not `overdue` (their overdue history rows and events stay)."""
        if "invoices overdue at the end" in self.expected:
            self.expected["invoices overdue at the end"] -= count

    def effects(self, conn: psycopg.Connection[Any]) -> list[EffectCheck]:
        checks = []
        for what, expected in self.expected.items():
            row = conn.execute(COUNTS[what], (self.tenant,)).fetchone()  # type: ignore[arg-type]
            checks.append(EffectCheck(JOB_OF[what], what, expected, int(row[0]) if row else -1))
        return checks


def verify_ses_sender(endpoint: str) -> None:
    """moto's SES refuses mail from an unverified address, like SES in its sandbox."""
    import boto3

    boto3.client("ses", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").verify_email_identity(EmailAddress=SES_FROM)
