"""What a run feeds and later judges: the plan seeded before the replicas
start, and the domain invariants and scenario summary judged from it after
the run (webhook_checks.py, payment_checks.py, billing_checks.py)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import psycopg

from .billing_checks import billing_invariants
from .billing_load import OVERDUE_JOB, RECURRING_JOB, BillingLoad, local_due_on
from .loadgen import CronJob
from .payment_checks import payment_invariants
from .payments_load import PaymentsLoad
from .report import Invariant
from .sqs_bridge import SqsBridge
from .tenants import Tenant
from .webhook_checks import webhook_invariants
from .webhook_load import WebhookLoad

RETRY_SCHEDULE = (0.2, 0.5, 1.0)  # seconds (WEBHOOK_RETRY_SCHEDULE_SECONDS); 4 attempts, then dead-lettered
RETRY_AFTER_CAP = 3.0  # seconds: WEBHOOK_MAX_RETRY_AFTER_SECONDS; well above a retry's pickup time, so an
# ignored Retry-After shows (a clamped one costs 3 s, in parallel with the rest)


@dataclass
class Plan:
    """What a run feeds and later judges, seeded before the replicas start."""

    tenants: list[Tenant]
    webhooks: WebhookLoad
    billing: BillingLoad
    payments: PaymentsLoad | None  # None when the template has no payment watcher
    bridge: SqsBridge | None  # the watcher's SQS queue, drained into the dispatcher
    messages: list[Any]
    retry_queue: str
    cron_jobs: list[CronJob]


def domain_invariants(conn: psycopg.Connection[Any], receiver: Any, plan: Plan, kills: int) -> list[Invariant]:
    """The seeded scenarios, judged from the database and the receiver."""
    from onceonly_app.webhooks.backoff import RetryPolicy

    longest = RetryPolicy(RETRY_SCHEDULE, RETRY_AFTER_CAP).longest_delay  # the schedule's, with its jitter
    judged = webhook_invariants(conn, receiver.history(), plan.webhooks, RETRY_AFTER_CAP, longest, kills)
    if plan.payments:
        judged += payment_invariants(conn, plan.payments.payments, plan.payments.baits, plan.payments.accepted,
                                     plan.payments.overpaid)
    billing = plan.billing
    last_overdue = billing.ticks[OVERDUE_JOB][-1] if OVERDUE_JOB in billing.jobs.values() else None
    kinds = ("zero", "sub-cent", "outage") if plan.payments else ("zero",)  # the others need the watcher
    scenario_ids = {kind: [i.id for i in billing.invoices if i.kind == kind] for kind in kinds}
    promised = {i.id: local_due_on(i) for i in billing.invoices}
    recurring = billing.ticks[RECURRING_JOB] if RECURRING_JOB in billing.jobs.values() else None
    return judged + billing_invariants(conn, last_overdue, sum(1 for i in billing.invoices if i.kind == "due today"),
                                       scenario_ids, promised=promised, recurring_ticks=recurring)


def scenarios(plan: Plan) -> dict[str, Any]:
    """What was seeded for the domain invariants, for the report."""
    unmatched = Counter(p.reason for p in plan.payments.payments if p.reason) if plan.payments else Counter()
    return {
        "tenants": [{"id": t.id, "time_zone": t.time_zone, "currency": t.currency,
                     "subscriptions": len(plan.webhooks.subscriptions_by_tenant()[t.id])} for t in plan.tenants],
        "hostile_retry_after": sorted(plan.webhooks.retry_after_of.values()),
        "trickled_deliveries": len(plan.webhooks.trickled),
        "misaddressed_events": len(plan.webhooks.misaddressed),
        "events_held_for_a_disabled_subscription": len(plan.webhooks.held),
        "payments_not_credited": dict(sorted(unmatched.items())),
        "multi_operation_transactions": len({p.transaction_hash for p in plan.payments.payments if p.operations > 1})
        if plan.payments else 0,
    }
