"""Each job's REAL handler in 8 OS processes at once, same scheduled event, on
each coordination store: exactly one run, and exactly one set of effects in the
recorded history (transitions, history rows, activity events, e-mails sent,
invoices generated, payments applied, webhook events enqueued)."""

from __future__ import annotations

from collections import Counter
from datetime import date, timedelta
from typing import Any

import pytest

from onceonly_cli.testing.fake_payments import FakePayments
from tests.support.functions.events import scheduled_event
from tests.support.jobs import jobs_data as data
from tests.support.jobs.jobs_helpers import JobScope, drain_queue, payments_env, sent_emails
from tests.support.jobs.jobs_workers import Replicas

pytestmark = [pytest.mark.concurrency, pytest.mark.processes]

TICK = "2026-11-29T02:00:00Z"
REPLICAS = 8


def one_ran(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Exactly one replica ran the tick; the others were skipped, none failed;
    and the replicas raced: at least one found the tick held by the running
    replica (had they run one after another, every skip would say 'completed')."""
    assert all("outcome" in r for r in records), [r for r in records if "outcome" not in r]
    statuses = Counter(r["outcome"]["status"] for r in records)
    assert statuses == {"ran": 1, "skipped": REPLICAS - 1}, statuses
    reasons = Counter(r["outcome"]["reason"] for r in records if r["outcome"]["status"] == "skipped")
    assert reasons["running"] >= 1, f"no replica met the tick while it ran: they did not race ({reasons})"
    (ran,) = [r["outcome"] for r in records if r["outcome"]["status"] == "ran"]
    return ran


def race(replicas: Replicas, jobs_db: str, scope: JobScope, function: str, table: str,
         **env: str) -> list[dict[str, Any]]:
    """REPLICAS copies of ``function``'s handler on one tick, released together;
    the winner is held in its body (``table`` locked) until the others answered."""
    invocation = scope.invocation(function, scheduled_event(function, TICK), **env,
                                  DATABASE_URL=f"{scope.env['DATABASE_URL']}?timeout=300")
    return replicas.run_while_the_winner_waits(invocation, jobs_db, table, REPLICAS)


def test_overdue_invoices_once(job_scope: JobScope, replicas: Replicas, jobs_db: str) -> None:
    with data.connect(jobs_db) as conn:
        late = [data.add_invoice(conn, job_scope.tenant, due_at="2026-11-20T00:00:00Z") for _ in range(3)]
        data.add_invoice(conn, job_scope.tenant, due_at="2026-12-20T00:00:00Z")
        data.add_invoice(conn, job_scope.tenant, due_at="2026-11-20T00:00:00Z", status="paid")
        data.ledger_read(conn, job_scope.job, tenant=job_scope.tenant)  # the scope's payment watcher is not behind

    records = race(replicas, jobs_db, job_scope, "overdue_invoices", "invoices")

    assert one_ran(records)["result"] == {"transitioned": 3}
    with data.connect(jobs_db) as conn:
        effects = data.invoice_effects(conn, job_scope.tenant)
    assert effects["statuses"] == {"overdue": 3, "open": 1, "paid": 1}
    assert [(h["invoice_id"], h["from_status"], h["to_status"]) for h in effects["history"]] == [
        (i, "open", "overdue") for i in sorted(late)]
    assert effects["activity"] == effects["activity_keys"] == 3
    assert effects["notifications"] == 3


def test_notifications_sent_once(job_scope: JobScope, replicas: Replicas, jobs_db: str) -> None:
    with data.connect(jobs_db) as conn:
        keys = [data.add_notification(conn, job_scope.tenant) for _ in range(3)]

    records = race(replicas, jobs_db, job_scope, "notifications", "notifications")

    assert one_ran(records)["result"]["sent"] == 3
    emails = sent_emails(f"@{job_scope.tenant}.test")
    assert sorted(m.destinations["ToAddresses"][0] for m in emails) == sorted(
        f"{k}@{job_scope.tenant}.test" for k in keys)
    with data.connect(jobs_db) as conn:
        outbox = data.notification_rows(conn, job_scope.tenant)
    assert [(r["status"], r["attempts"], r["attempt_rows"], r["sent_rows"]) for r in outbox] == [
        ("sent", 1, 1, 1)] * 3


def test_recurring_billing_generates_once(job_scope: JobScope, replicas: Replicas, jobs_db: str) -> None:
    tick_day = date(2026, 11, 29)
    with data.connect(jobs_db) as conn:
        schedule = data.add_schedule(conn, job_scope.tenant, cadence="daily", anchor=tick_day - timedelta(days=2))

    records = race(replicas, jobs_db, job_scope, "recurring_billing", "billing_schedules")

    assert one_ran(records)["result"] == {"generated": 3}
    with data.connect(jobs_db) as conn:
        invoices = data.rows(conn, "SELECT period_key FROM invoices WHERE schedule_id = %s ORDER BY 1", schedule)
        effects = data.invoice_effects(conn, job_scope.tenant)
    assert [i["period_key"] for i in invoices] == ["2026-11-27", "2026-11-28", "2026-11-29"]
    assert effects["activity"] == 3 and effects["notifications"] == 3


def test_payment_watcher_applies_once(job_scope: JobScope, replicas: Replicas, jobs_db: str,
                                      fake_payments: FakePayments, sqs_queue: str, moto_endpoint: str) -> None:
    with data.connect(jobs_db) as conn:
        invoices = [data.add_invoice(conn, job_scope.tenant, due_at="2026-12-20T00:00:00Z", amount_cents=2500)
                    for _ in range(2)]
        webhook = data.add_subscription(conn, job_scope.tenant)
        data.add_receiving_account(conn, job_scope.tenant, fake_payments.receiver)
    hashes = [fake_payments.add(memo=i, amount="25.00")["transaction_hash"] for i in invoices]
    fake_payments.add(memo="no-such-invoice", amount="1.00")
    records = race(replicas, jobs_db, job_scope, "payment_watcher", "payments",
                   **payments_env(fake_payments, sqs_queue))

    result = one_ran(records)["result"]
    assert (result["payments_applied"], result["invoices_paid"]) == (3, 2)
    with data.connect(jobs_db) as conn:
        payments = data.rows(conn, "SELECT transaction_hash, invoice_id FROM payments WHERE poller = %s",
                             job_scope.job)
        effects = data.invoice_effects(conn, job_scope.tenant)
        data.delete_subscription(conn, webhook)
    assert len(payments) == 3 and sum(p["invoice_id"] is not None for p in payments) == 2
    assert effects["statuses"] == {"paid": 2}
    assert [h["to_status"] for h in effects["history"]] == ["paid", "paid"]
    mine = [m for m in drain_queue(moto_endpoint, sqs_queue) if m["webhook_id"] == webhook]
    # the unknown memo's payment.unmatched too, once
    assert sorted(m["event_type"] for m in mine) == ["invoice.paid", "invoice.paid", "payment.unmatched"]
    assert sorted(m["payload"]["transaction_hash"] for m in mine if m["event_type"] == "invoice.paid") == \
        sorted(hashes)
    assert len({m["event_id"] for m in mine}) == 3
