"""A run SIGKILLed mid-job is taken over by a retry of the same tick once its
lease expired, and the recorded history still shows exactly one set of
effects. Each job runs on one store (between them, all three are covered);
the 8-replica suite covers every job on every store."""

from __future__ import annotations

import os
import signal
import time
from datetime import date, timedelta
from typing import Any

import pytest

import onceonly
from onceonly_cli.testing.fake_payments import FakePayments
from tests.support.functions.events import scheduled_event
from tests.support.jobs import jobs_data as data
from tests.support.jobs.jobs_helpers import JobScope, drain_queue, make_scope, payments_env, sent_emails
from tests.support.jobs.jobs_workers import Replicas, wait_until_expired, wait_until_stopped

pytestmark = pytest.mark.concurrency

TICK = "2026-11-29T02:00:00Z"
SHORT = "2"  # the killed run's leases, seconds: the retry waits this long, never less


@pytest.fixture
def scope_on(request: pytest.FixtureRequest, jobs_db: str, moto_endpoint: str, ses_sender: str,
             unique: str) -> Any:
    """``scope_on(backend)`` -> (JobScope, store) on that coordination store."""
    opened: list[onceonly.Store] = []

    def make(backend: str) -> tuple[JobScope, onceonly.Store]:
        url = str(request.getfixturevalue(f"{backend}_url"))
        store = onceonly.connect(url)
        store.setup()
        opened.append(store)
        return make_scope(jobs_db, url, moto_endpoint, ses_sender, unique), store

    yield make
    for store in opened:
        store.close()


def kill_mid_job_then_retry(replicas: Replicas, store: onceonly.Store, scope: JobScope, function: str,
                            pause_at: str, *lease_names: str, **env: str) -> tuple[dict[str, Any], dict[str, int]]:
    """Start a run that stops itself at ``pause_at``, SIGKILL it there, wait for
    its leases to expire, then invoke a retry of the same tick; its outcome, and
    the tokens the killed run held (tick and poller leases, by name). Tokens are
    compared, never counted: Redis floors them by its clock."""
    event = scheduled_event(function, TICK)
    victim = replicas.start(scope.invocation(function, event, **env, TICK_LEASE_SECONDS=SHORT,
                                             POLLER_LEASE_SECONDS=SHORT),
                            name="victim", pause_at=pause_at)
    wait_until_stopped(victim)
    assert victim.pid is not None
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(10)
    assert victim.exitcode == -signal.SIGKILL

    tick_name = f"tick:{scope.job}:{TICK}"
    wait_until_expired(store, tick_name, *lease_names)
    held = {name: state.token for name in (tick_name, f"poller:{scope.job}", *lease_names)
            if (state := store.inspect(name)) is not None}
    retry = replicas.start(scope.invocation(function, event, **env), name="retry")
    replicas.join(retry)
    outcome: dict[str, Any] = replicas.record("retry")["outcome"]
    taken_over = store.inspect(tick_name)
    assert outcome["status"] == "ran" and outcome["reclaimed"] is True and outcome["token"] > held[tick_name]
    assert taken_over is not None and taken_over.grant_number == 2  # the victim's grant, then the retry's
    return outcome, held


def test_overdue_killed_run_is_taken_over(scope_on: Any, replicas: Replicas, jobs_db: str) -> None:
    scope, store = scope_on("redis")
    with data.connect(jobs_db) as conn:
        late = sorted(data.add_invoice(conn, scope.tenant, due_at="2026-11-01T00:00:00Z") for _ in range(2))
        data.ledger_read(conn, scope.job, tenant=scope.tenant)  # the scope's payment watcher is not behind

    outcome, _ = kill_mid_job_then_retry(replicas, store, scope, "overdue_invoices", "overdue.before_transitions")

    assert outcome["result"] == {"transitioned": 2}
    with data.connect(jobs_db) as conn:
        effects = data.invoice_effects(conn, scope.tenant)
        tick = data.rows(conn, "SELECT fence_token, finished_at FROM job_ticks WHERE job = %s", scope.job)
    assert effects["statuses"] == {"overdue": 2}
    assert [(h["invoice_id"], h["fence_token"]) for h in effects["history"]] == [(i, outcome["token"]) for i in late]
    assert effects["activity"] == 2 and effects["notifications"] == 2
    assert len(tick) == 1 and tick[0]["fence_token"] == outcome["token"] and tick[0]["finished_at"] is not None


def test_notifications_killed_after_claiming_are_sent_once(scope_on: Any, replicas: Replicas,
                                                           jobs_db: str) -> None:
    scope, store = scope_on("dynamodb")
    with data.connect(jobs_db) as conn:
        keys = [data.add_notification(conn, scope.tenant) for _ in range(3)]

    def claims_expired() -> None:  # the dead run's claims must run out too
        deadline = time.monotonic() + 60
        with data.connect(jobs_db) as conn:
            while data.rows(conn, "SELECT 1 FROM notifications WHERE tenant_id = %s AND status = 'sending'"
                                  " AND claimable_at > now()", scope.tenant):
                assert time.monotonic() < deadline, "claims did not expire"
                time.sleep(0.2)

    event = scheduled_event("notifications", TICK)
    victim = replicas.start(scope.invocation("notifications", event, NOTIFICATION_CLAIM_SECONDS=SHORT,
                                             TICK_LEASE_SECONDS=SHORT),
                            name="victim", pause_at="notifications.before_send")
    wait_until_stopped(victim)
    assert victim.pid is not None
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(10)
    with data.connect(jobs_db) as conn:
        claimed = data.notification_rows(conn, scope.tenant)
    assert [(r["status"], r["attempts"]) for r in claimed] == [("sending", 1)] * 3
    wait_until_expired(store, f"tick:{scope.job}:{TICK}")
    claims_expired()
    retry = replicas.start(scope.invocation("notifications", event), name="retry")
    replicas.join(retry)

    outcome = replicas.record("retry")["outcome"]
    assert outcome["status"] == "ran" and outcome["reclaimed"] is True and outcome["result"]["sent"] == 3
    emails = sent_emails(f"@{scope.tenant}.test")
    assert sorted(m.destinations["ToAddresses"][0] for m in emails) == sorted(f"{k}@{scope.tenant}.test"
                                                                             for k in keys)
    with data.connect(jobs_db) as conn:
        rows = data.notification_rows(conn, scope.tenant)
    # second claim, one send: the killed claim never reached SES
    assert [(r["status"], r["attempts"], r["attempt_rows"], r["sent_rows"]) for r in rows] == [
        ("sent", 2, 1, 1)] * 3


def test_recurring_killed_run_is_taken_over(scope_on: Any, replicas: Replicas, jobs_db: str) -> None:
    scope, store = scope_on("postgres")
    with data.connect(jobs_db) as conn:
        schedule = data.add_schedule(conn, scope.tenant, cadence="weekly", anchor=date(2026, 11, 29) - timedelta(
            weeks=2))

    outcome, _ = kill_mid_job_then_retry(replicas, store, scope, "recurring_billing", "recurring.before_generate")

    assert outcome["result"] == {"generated": 3}
    assert data.generated_invoices(jobs_db, scope.tenant, schedule) == {
        "periods": ["2026-11-15", "2026-11-22", "2026-11-29"], "activity": 3, "notifications": 3}


def test_payment_watcher_killed_before_sending_loses_no_webhook(
        scope_on: Any, replicas: Replicas, jobs_db: str, fake_payments: FakePayments, sqs_queue: str,
        moto_endpoint: str) -> None:
    scope, store = scope_on("redis")
    with data.connect(jobs_db) as conn:
        invoices = [data.add_invoice(conn, scope.tenant, due_at="2026-12-20T00:00:00Z", amount_cents=500)
                    for _ in range(2)]
        webhook = data.add_subscription(conn, scope.tenant)
        data.add_receiving_account(conn, scope.tenant, fake_payments.receiver)
    hashes = sorted(fake_payments.add(memo=i, amount="5")["transaction_hash"] for i in invoices)

    try:
        # killed after the payments committed, before their webhook events reached SQS
        outcome, held = kill_mid_job_then_retry(replicas, store, scope, "payment_watcher", "payments.before_publish",
                                                **payments_env(fake_payments, sqs_queue))
    finally:
        with data.connect(jobs_db) as conn:
            data.delete_subscription(conn, webhook)

    assert outcome["result"]["payments_applied"] == 0  # the killed run applied them
    with data.connect(jobs_db) as conn:
        payments = data.rows(conn, "SELECT transaction_hash, fence_token FROM payments WHERE poller = %s"
                                   " ORDER BY 1", scope.job)
        effects = data.invoice_effects(conn, scope.tenant)
    # applied under the killed run's poller lease
    assert [(p["transaction_hash"], p["fence_token"]) for p in payments] == [(h, held[f"poller:{scope.job}"])
                                                                             for h in hashes]
    assert effects["statuses"] == {"paid": 2} and len(effects["history"]) == 2
    mine = [m for m in drain_queue(moto_endpoint, sqs_queue) if m["webhook_id"] == webhook]
    assert sorted(m["payload"]["transaction_hash"] for m in mine) == hashes  # sent by the retry, once each
