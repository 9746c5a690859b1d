"""A run paused past its lease (SIGSTOP, then SIGCONT) cannot commit: a newer
run took over and stamped a higher fencing token, and the paused run's
transitions (overdue invoices) and cursor (payment watcher) are refused.

Sequence: run A stops itself at a pause point while holding its lease; its
lease expires; run B takes over and stops at the same point after stamping its
token; A is resumed and must commit nothing; then B is resumed and commits
everything, stamped with its own token."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

import onceonly
from onceonly_app.billing.payment_watcher import cursor_name
from onceonly_cli.testing.fake_payments import FakePayments
from tests.support.functions.events import scheduled_event
from tests.support.jobs import jobs_data as data
from tests.support.jobs.jobs_helpers import drain_queue, make_scope, payments_env
from tests.support.jobs.jobs_workers import Replicas, wait_until_expired, wait_until_stopped

pytestmark = pytest.mark.concurrency

SHORT = {"TICK_LEASE_SECONDS": "2", "POLLER_LEASE_SECONDS": "2"}


def poller_token(store: onceonly.Store, job: str) -> int:
    state = store.inspect(f"poller:{job}")
    assert state is not None, "the poller lease was never granted"
    return state.token


def resume(replicas: Replicas, proc: Any, name: str) -> dict[str, Any]:
    os.kill(proc.pid, signal.SIGCONT)
    replicas.join(proc)
    return replicas.record(name)


def test_paused_overdue_run_cannot_commit_its_transitions(
        postgres_url: str, jobs_db: str, moto_endpoint: str, ses_sender: str, unique: str,
        replicas: Replicas) -> None:
    scope = make_scope(jobs_db, postgres_url, moto_endpoint, ses_sender, unique)
    store = onceonly.connect(postgres_url)
    store.setup()
    with data.connect(jobs_db) as conn:
        late = sorted(data.add_invoice(conn, scope.tenant, due_at="2026-11-01T00:00:00Z") for _ in range(3))
        data.ledger_read(conn, scope.job, tenant=scope.tenant)  # the scope's payment watcher is not behind
    event = scheduled_event("overdue_invoices", "2026-11-29T02:00:00Z")

    paused = replicas.start(scope.invocation("overdue_invoices", event, **SHORT), name="paused",
                            pause_at="overdue.before_transitions")
    wait_until_stopped(paused)
    wait_until_expired(store, f"tick:{scope.job}:2026-11-29T02:00:00Z")
    newer = replicas.start(scope.invocation("overdue_invoices", event), name="newer",
                           pause_at="overdue.before_transitions")
    wait_until_stopped(newer)  # it holds the tick and stamped token 2

    stale = resume(replicas, paused, "paused")["outcome"]
    assert stale["status"] == "superseded" and stale["token"] == 1
    with data.connect(jobs_db) as conn:
        assert data.invoice_effects(conn, scope.tenant)["statuses"] == {"open": 3}  # refused: nothing moved

    current = resume(replicas, newer, "newer")["outcome"]
    assert current["status"] == "ran" and current["token"] == 2 and current["result"] == {"transitioned": 3}
    with data.connect(jobs_db) as conn:
        effects = data.invoice_effects(conn, scope.tenant)
    assert effects["statuses"] == {"overdue": 3}
    assert [(h["invoice_id"], h["fence_token"]) for h in effects["history"]] == [(i, 2) for i in late]
    assert effects["activity"] == 3 and effects["notifications"] == 3
    store.close()


def test_paused_poller_cannot_commit_its_cursor(
        redis_url: str, jobs_db: str, moto_endpoint: str, ses_sender: str, unique: str, replicas: Replicas,
        fake_payments: FakePayments, sqs_queue: str) -> None:
    scope = make_scope(jobs_db, redis_url, moto_endpoint, ses_sender, unique)
    store = onceonly.connect(redis_url)
    with data.connect(jobs_db) as conn:
        invoices = [data.add_invoice(conn, scope.tenant, due_at="2026-12-20T00:00:00Z", amount_cents=700)
                    for _ in range(2)]
        webhook = data.add_subscription(conn, scope.tenant)
        data.add_receiving_account(conn, scope.tenant, fake_payments.receiver)
    cursor_row = cursor_name(scope.job, fake_payments.receiver)  # the receiving account's feed
    records = [fake_payments.add(memo=i, amount="7") for i in invoices]
    pay_env = payments_env(fake_payments, sqs_queue)

    try:
        # A polls for the 10:07 tick and stops after fetching the page, holding the poller lease
        paused = replicas.start(scope.invocation("payment_watcher",
                                                 scheduled_event("payment_watcher", "2026-11-29T10:07:00Z"),
                                                 **pay_env, **SHORT),
                                name="paused", pause_at="payments.before_apply")
        wait_until_stopped(paused)
        wait_until_expired(store, f"tick:{scope.job}:2026-11-29T10:07:00Z", f"poller:{scope.job}")
        paused_token = poller_token(store, scope.job)
        # B is the next minute's tick: a new tick lock, the same (expired) poller lease
        newer = replicas.start(scope.invocation("payment_watcher",
                                                scheduled_event("payment_watcher", "2026-11-29T10:08:00Z"),
                                                **pay_env),
                               name="newer", pause_at="payments.before_apply")
        wait_until_stopped(newer)
        newer_token = poller_token(store, scope.job)  # Redis tokens are ordered, not counted
        assert newer_token > paused_token

        stale = resume(replicas, paused, "paused")["outcome"]
        assert stale["status"] == "superseded"
        with data.connect(jobs_db) as conn:
            cursor = data.rows(conn, "SELECT cursor, fence_token FROM payment_cursors WHERE poller = %s",
                               cursor_row)
            applied = data.rows(conn, "SELECT 1 FROM payments WHERE poller = %s", scope.job)
        assert cursor == [{"cursor": "", "fence_token": newer_token}] and applied == []  # A moved nothing

        current = resume(replicas, newer, "newer")["outcome"]
    finally:
        with data.connect(jobs_db) as conn:
            data.delete_subscription(conn, webhook)

    assert current["status"] == "ran" and current["result"]["payments_applied"] == 2
    with data.connect(jobs_db) as conn:
        cursor = data.rows(conn, "SELECT cursor, fence_token FROM payment_cursors WHERE poller = %s", cursor_row)
        payments = data.rows(conn, "SELECT fence_token FROM payments WHERE poller = %s", scope.job)
        effects = data.invoice_effects(conn, scope.tenant)
    assert cursor == [{"cursor": records[-1]["paging_token"], "fence_token": newer_token}]
    assert [p["fence_token"] for p in payments] == [newer_token, newer_token]
    assert effects["statuses"] == {"paid": 2}
    mine = [m for m in drain_queue(moto_endpoint, sqs_queue) if m["webhook_id"] == webhook]
    assert len(mine) == 2
    store.close()
