"""The scheduled-jobs half of the simulation: each tenant's invoices and
recurring schedules, the ticks each job gets, and afterwards the effects
counted in the database against what exactly one run per tick must produce.

Each job's ticks are the last times its schedule fired (schedule.py); the
run's own database and store (run_scope.py) keep runs apart, so the jobs run
unscoped, over every tenant, as deployed.

Seeded per tenant (tenants.py), to be judged by billing_checks.py:
- invoices whose due day (in the tenant's time zone) ended at least a day
  before the last overdue tick, invoices not due for a month, and one due on
  the last tick's local day, early in that day: a due day judged in UTC would
  move it when the tick falls at 00:00-09:59 UTC (Honolulu) or 00:00-14:59
  UTC (Tokyo); at other hours no instant of that local day could (its local
  day began after the tick's UTC day), and the run checks only that it stays
  open;
- the money edge cases, each judged on its own: a zero invoice (settled
  when issued, never overdue); an invoice paid exactly by sub-cent parts
  before its due day ended ("sub-cent"); and one paid on the day before the
  last tick's local day while the payments API is down across the overdue
  run ("outage": the watcher sees the payment only after that run);
- daily schedules with missed periods, one of them with a pause window over
  part of its catch-up: those periods must never be billed; their catch-up
  invoices are issued late (days after their period start), so they are due
  from their issue day, never born overdue;
- a schedule created inactive, anchored days back, switched on at once: its
  inactive spell is never billed;
- a zone change mid-run: before the overdue run, the UTC tenant moves to New
  York, which moves none of the due dates already promised."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import psycopg

from .loadgen import CronJob
from .report import EffectCheck
from .tenants import Tenant, seed_tenants

OVERDUE_INVOICES = 6  # per tenant
NOT_YET_DUE_INVOICES = 8  # per tenant
SCHEDULES = 2  # per tenant; the second has a pause window (and a third is created inactive)
INACTIVE_MISSED = 4  # periods the inactive schedule's anchor is behind the first recurring tick
ZONE_CHANGE = ("UTC", "America/New_York")  # the tenant in the first zone moves to the second, mid-run
PAUSE = (1, 3)  # the paused schedule's window [anchor + 1, anchor + 3): two periods never billed
PAUSED_MISSED = 6  # periods of the paused schedule already due at the first tick
# kind: (cents, its due day: days before the last overdue tick's local day)
SCENARIOS = {"zero": (0, 3), "sub-cent": (10_01, 3), "outage": (15_00, 1)}
TICKS_PER_JOB = 2  # the last two times each job's schedule fired
OVERDUE_JOB, RECURRING_JOB, NOTIFICATIONS_JOB = "overdue-invoices", "recurring-billing", "notifications"
SES_FROM = "billing@onceonly.invalid"

INSERT_INVOICE = """
INSERT INTO invoices (id, tenant_id, customer_email, amount_cents, currency, status, due_at)
VALUES (%s, %s, %s, %s, %s, 'open', %s)"""
INSERT_SCHEDULE = """
INSERT INTO billing_schedules (id, tenant_id, customer_email, amount_cents, currency, cadence, anchor)
VALUES (%s, %s, %s, %s, %s, 'daily', %s)"""
INSERT_PAUSE = "INSERT INTO billing_schedule_pauses (schedule_id, paused_on, resumed_on) VALUES (%s, %s, %s)"
INSERT_INACTIVE_SCHEDULE = """
INSERT INTO billing_schedules (id, tenant_id, customer_email, amount_cents, currency, cadence, anchor, active)
VALUES (%s, %s, %s, %s, %s, 'daily', %s, false)"""
SWITCH_ON = """
UPDATE billing_schedules SET active = true WHERE id = %s;
"""
INACTIVE_WINDOW = "SELECT paused_on, resumed_on FROM billing_schedule_pauses WHERE schedule_id = %s"
CHANGE_ZONE = """
INSERT INTO billing_tenants (tenant_id, time_zone) VALUES (%s, %s)
ON CONFLICT (tenant_id) DO UPDATE SET time_zone = EXCLUDED.time_zone, updated_at = now()"""
COUNTS = {
    "invoices overdue at the end": "SELECT count(*) FROM invoices WHERE tenant_id = ANY(%s) AND status = 'overdue'",
    "overdue history rows": """SELECT count(*) FROM invoice_status_history h JOIN invoices i ON i.id = h.invoice_id
                                WHERE i.tenant_id = ANY(%s) AND h.to_status = 'overdue'""",
    "overdue activity events": """SELECT count(*) FROM activity_events
                                   WHERE tenant_id = ANY(%s) AND kind = 'invoice.overdue'""",
    "invoices generated": "SELECT count(*) FROM invoices WHERE tenant_id = ANY(%s) AND schedule_id IS NOT NULL",
    "invoice.created events": """SELECT count(*) FROM activity_events
                                  WHERE tenant_id = ANY(%s) AND kind = 'invoice.created'""",
    "e-mails queued": "SELECT count(*) FROM notifications WHERE tenant_id = ANY(%s)",
    "e-mails sent": "SELECT count(*) FROM notifications WHERE tenant_id = ANY(%s) AND status = 'sent'",
    "e-mails cancelled (paid first)": """SELECT count(*) FROM notifications
                                          WHERE tenant_id = ANY(%s) AND status = 'cancelled'""",
}
JOB_OF = {
    "invoices overdue at the end": OVERDUE_JOB, "overdue history rows": OVERDUE_JOB,
    "overdue activity events": OVERDUE_JOB, "invoices generated": RECURRING_JOB,
    "invoice.created events": RECURRING_JOB, "e-mails queued": "overdue + recurring",
    "e-mails sent": NOTIFICATIONS_JOB, "e-mails cancelled (paid first)": NOTIFICATIONS_JOB,
}


@dataclass(frozen=True)
class SeededInvoice:
    id: str
    tenant: Tenant
    amount_cents: int
    kind: str  # "overdue" (its due day ended before the last overdue tick), "due today", "not due", or SCENARIOS
    due_at: datetime

    @property
    def overdue(self) -> bool:
        return self.kind == "overdue"


def local_due_at(zone: str, day: date, rng: random.Random) -> datetime:
    """A time early in ``day`` (before 09:00) in ``zone``: on the last overdue
    tick's local day, its UTC day has ended by that tick whenever any instant
    of that local day's has (tests/onceonly_cli/unit/test_simulate_seeding.py)."""
    return datetime.combine(day, time(rng.randrange(9), rng.randrange(60)), ZoneInfo(zone))


def local_due_on(invoice: SeededInvoice) -> date:
    """The due date the invoice was issued with: its due time's date in its tenant's seeded zone."""
    return invoice.due_at.astimezone(ZoneInfo(invoice.tenant.time_zone)).date()


def local_today(when: datetime, tenant: Tenant) -> date:
    return when.astimezone(ZoneInfo(tenant.time_zone)).date()


def billed_periods(anchor: date, last: date, pause: tuple[date, date] | None) -> int:
    """Daily periods from ``anchor`` to ``last`` (both included), less those
    starting inside the pause window [from, until)."""
    total = (last - anchor).days + 1
    if pause is None:
        return total
    return total - sum(1 for k in range(total) if pause[0] <= anchor + timedelta(days=k) < pause[1])


@dataclass
class BillingLoad:
    rng: random.Random
    jobs: dict[str, str]  # logical id -> job name, of the jobs present
    ticks: dict[str, list[datetime]]  # job name -> its ticks, oldest first
    tenants: list[Tenant]
    expected: dict[str, int] = field(default_factory=dict)
    invoices: list[SeededInvoice] = field(default_factory=list)
    database_url: str = ""
    moved_zone: str | None = None  # the tenant whose zone changes mid-run

    def change_zone(self) -> None:
        """The zone change mid-run (before the overdue run): idempotent."""
        if self.moved_zone is not None:
            with psycopg.connect(self.database_url, autocommit=True) as conn:
                conn.execute(CHANGE_ZONE, (self.moved_zone, ZONE_CHANGE[1]))

    def env(self) -> dict[str, str]:
        return {
            "TICK_LEASE_SECONDS": "2",  # a crashed run's tick is taken over this soon
            "NOTIFICATION_CLAIM_SECONDS": "1.5",  # must run out before the tick's takeover
            "SES_FROM_ADDRESS": SES_FROM,
        }

    def cron_jobs(self, watcher: tuple[CronJob, CronJob, Callable[[], None]] | None = None) -> list[CronJob]:
        """Jobs run one after another in this order: the payment watcher reads
        the ledger up to the day before the last overdue tick's; the payments
        API goes down (``watcher``'s callable) for the overdue and recurring
        runs; it is back for the watcher's later run, which pays some of the
        overdue invoices, and e-mails are sent after that: those invoices'
        overdue e-mails must be cancelled, not sent."""
        before, after, outage = watcher if watcher else (None, None, None)
        order = ["OverdueInvoicesFunction", "RecurringBillingFunction"]
        jobs = [CronJob(fid, self.jobs[fid], self.ticks[self.jobs[fid]]) for fid in order if fid in self.jobs]
        if jobs:
            def mid_run() -> None:
                self.change_zone()
                if outage is not None:
                    outage()
            jobs[0] = replace(jobs[0], before=mid_run)
        jobs = ([before] if before else []) + jobs + ([after] if after else [])
        if "NotificationsFunction" in self.jobs:
            jobs.append(CronJob("NotificationsFunction", NOTIFICATIONS_JOB, self.ticks[NOTIFICATIONS_JOB]))
        return jobs

    def seed(self, database_url: str) -> None:
        last_overdue, billing_ticks = self.ticks[OVERDUE_JOB][-1], self.ticks[RECURRING_JOB]
        overdue = generated = 0
        self.database_url = database_url
        self.moved_zone = next((t.id for t in self.tenants if t.time_zone == ZONE_CHANGE[0]), None)
        with psycopg.connect(database_url) as conn:
            seed_tenants(conn, self.tenants)  # type: ignore[arg-type]
            for tenant in self.tenants:
                # recurring billing runs after the zone change: its local days are the new zone's
                billed_zone = ZONE_CHANGE[1] if tenant.id == self.moved_zone else tenant.time_zone
                last_billed = billing_ticks[-1].astimezone(ZoneInfo(billed_zone)).date()
                today = local_today(last_overdue, tenant)  # the last tick's local day
                kinds = ["overdue"] * OVERDUE_INVOICES + ["due today"] + ["not due"] * NOT_YET_DUE_INVOICES
                for i, kind in enumerate(kinds + list(SCENARIOS)):
                    # overdue: ended before the day before today, which the watcher reads before the outage
                    day = today - timedelta(days=self.rng.randint(2, 8)) if kind == "overdue" else \
                        today if kind == "due today" else today + timedelta(days=30) if kind == "not due" else \
                        today - timedelta(days=SCENARIOS[kind][1])
                    cents = SCENARIOS[kind][0] if kind in SCENARIOS else 1200 + 3 * i
                    invoice = SeededInvoice(f"inv_{tenant.id}_{i}", tenant, cents, kind,
                                            local_due_at(tenant.time_zone, day, self.rng))
                    conn.execute(INSERT_INVOICE, (invoice.id, tenant.id, f"c{i}@example.com", invoice.amount_cents,
                                                  tenant.currency, invoice.due_at))
                    self.invoices.append(invoice)
                    overdue += invoice.overdue
                for s in range(SCHEDULES):
                    paused = s == SCHEDULES - 1
                    missed = PAUSED_MISSED if paused else self.rng.randint(1, 4)  # periods due at the first tick
                    anchor = billing_ticks[0].date() - timedelta(days=missed - 1)
                    schedule_id = f"sch_{tenant.id}_{s}"
                    conn.execute(INSERT_SCHEDULE, (schedule_id, tenant.id, f"s{s}@example.com", 500 + s,
                                                   tenant.currency, anchor))
                    window = (anchor + timedelta(days=PAUSE[0]), anchor + timedelta(days=PAUSE[1])) if paused \
                        else None
                    if window:
                        conn.execute(INSERT_PAUSE, (schedule_id, *window))
                    generated += billed_periods(anchor, last_billed, window)
                generated += self._seed_inactive(conn, tenant, billing_ticks[0].date(), last_billed)
        has = self.jobs.values()
        overdue = overdue if OVERDUE_JOB in has else 0
        generated = generated if RECURRING_JOB in has else 0
        self.expected = {
            "invoices overdue at the end": overdue, "overdue history rows": overdue,
            "overdue activity events": overdue, "invoices generated": generated,
            "invoice.created events": generated, "e-mails queued": overdue + generated,
        }
        if NOTIFICATIONS_JOB in has:
            self.expected["e-mails sent"] = overdue + generated
            self.expected["e-mails cancelled (paid first)"] = 0

    def _seed_inactive(self, conn: psycopg.Connection[Any], tenant: Tenant, first_tick_day: date,
                       last_billed: date) -> int:
        """A schedule created inactive, anchored INACTIVE_MISSED periods back,
        switched on now; returns the periods it bills (from the switch-on)."""
        schedule_id = f"sch_{tenant.id}_inactive"
        anchor = first_tick_day - timedelta(days=INACTIVE_MISSED - 1)
        conn.execute(INSERT_INACTIVE_SCHEDULE, (schedule_id, tenant.id, "inactive@example.com", 700,
                                                tenant.currency, anchor))
        conn.execute(SWITCH_ON, (schedule_id,))
        row = conn.execute(INACTIVE_WINDOW, (schedule_id,)).fetchone()
        assert row is not None, f"{schedule_id}: created inactive, but no pause window was opened"
        return billed_periods(anchor, last_billed, (row[0], row[1]))

    def expect_paid_after_overdue(self, count: int) -> None:
        """``count`` overdue invoices get paid later in the run, before the
        e-mails go out: they end `paid`, not `overdue` (their overdue history
        rows and events stay), and their overdue e-mails are cancelled."""
        if OVERDUE_JOB not in self.jobs.values():
            return
        self.expected["invoices overdue at the end"] -= count
        if "e-mails sent" in self.expected:
            self.expected["e-mails sent"] -= count
            self.expected["e-mails cancelled (paid first)"] += count

    def effects(self, conn: psycopg.Connection[Any]) -> list[EffectCheck]:
        ids = [t.id for t in self.tenants]
        checks = []
        for what, expected in self.expected.items():
            row = conn.execute(COUNTS[what], (ids,)).fetchone()  # type: ignore[arg-type]
            checks.append(EffectCheck(JOB_OF[what], what, expected, int(row[0]) if row else -1))
        return checks


def verify_ses_sender(endpoint: str) -> None:
    """moto's SES refuses mail from an unverified address, like SES in its sandbox."""
    import boto3

    boto3.client("ses", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").verify_email_identity(EmailAddress=SES_FROM)
