"""Lambda's own retries run a crashed tick, and never a healthy one twice.

EventBridge invokes the scheduled functions asynchronously. When an invocation
fails (crash, out of memory, timeout), Lambda retries it about 60 s later, then
about 120 s after that. The REAL handlers run here with the tick lease of
template.yaml and those retry delays, all scaled down by SCALE:

- a run blocked mid-body (on a table lock, as a slow statement would be) keeps
  its tick past its lease, because its heartbeat renews it: a duplicate of the
  tick is skipped as "running";
- the run is SIGKILLed; the replay of its event at the first retry delay takes
  the tick over, and if that one dies too, the second retry does;
- the recorded history (invoices, status history, activity, e-mails) shows one
  set of effects.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import date, timedelta
from typing import Any

import pytest

import onceonly
from onceonly_cli.local.template import find_function
from tests.support.functions.events import scheduled_event
from tests.support.jobs import jobs_data as data
from tests.support.jobs.jobs_helpers import JobScope
from tests.support.jobs.jobs_workers import CTX, REPO, Invocation, Replicas, table_locked

pytestmark = pytest.mark.concurrency

TICK = "2026-11-29T02:00:00Z"
SCALE = 1 / 15  # template seconds -> test seconds (30 s lease -> 2 s, heartbeat 0.67 s)
LAMBDA_RETRY_DELAYS = (60.0, 120.0)  # after the first failure, then after the second
RETRY_DELAYS = tuple(d * SCALE for d in LAMBDA_RETRY_DELAYS)


def scaled_lease(logical_id: str, scope: JobScope) -> dict[str, str]:
    """The function's tick lease as deployed (template.yaml), scaled down; the
    heartbeat keeps its default, a third of the lease. The domain database's
    per-statement bound (``?timeout=``, 10 s by default) is raised: the body
    here stays blocked on a lock far longer than a real statement would."""
    deployed = float(find_function(REPO / "template.yaml", logical_id).environment["TICK_LEASE_SECONDS"])
    return {"TICK_LEASE_SECONDS": str(deployed * SCALE), "DATABASE_URL": f"{scope.env['DATABASE_URL']}?timeout=300"}


def wait_until_blocked(db_url: str, proc: Any, timeout: float = 60.0) -> None:
    """Until some session of this database waits for a lock (the job's statement)."""
    deadline = time.monotonic() + timeout
    with data.connect(db_url) as conn:
        while not data.rows(conn, "SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
                                  " AND wait_event_type = 'Lock'"):
            assert proc.is_alive(), "the job ended instead of blocking on the lock (see its record)"
            assert time.monotonic() < deadline, f"no job blocked on the lock within {timeout}s"
            time.sleep(0.05)


def sleep_past_two_leases(store: onceonly.Store, name: str, lease: float) -> None:
    """Until the tick's lease, as it stands now, would have run out twice over."""
    state = store.inspect(name)
    assert state is not None and state.grant_number == 1, state
    time.sleep(max(0.0, state.busy_until + 2 * lease - time.time()))


def held_past_its_lease(store: onceonly.Store, name: str, lease: float) -> None:
    """Two leases later, the tick is still held by its first grant: only renewals
    (the body itself never renews while it is blocked) can explain it."""
    sleep_past_two_leases(store, name, lease)
    state = store.inspect(name)
    assert state is not None and state.grant_number == 1 and not state.completed, state
    assert state.busy_until > time.time(), "the tick's lease ran out while its run was alive: no heartbeat"


def kill(proc: Any) -> float:
    """SIGKILL ``proc`` (a crash: no release, no completion); when it died."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    assert proc.exitcode == -signal.SIGKILL
    return time.monotonic()


def replay_at(replicas: Replicas, invocation: Invocation, name: str, at: float) -> Any:
    """Start ``invocation``'s process now (imports take a while) and let it call
    the handler at monotonic time ``at``, like Lambda's retry of a failed one."""
    go = CTX.Barrier(2)
    proc = replicas.start(invocation, name=name, barrier=go)
    time.sleep(max(0.0, at - time.monotonic()))
    go.wait(timeout=60)
    return proc


def outcome_of(replicas: Replicas, proc: Any, name: str) -> dict[str, Any]:
    replicas.join(proc)
    record = replicas.record(name)
    assert "outcome" in record, record
    return record["outcome"]  # type: ignore[no-any-return]


@pytest.fixture
def overdue_invoices(job_scope: JobScope, jobs_db: str) -> list[str]:
    with data.connect(jobs_db) as conn:
        data.ledger_read(conn, job_scope.job, tenant=job_scope.tenant)  # the scope's payment watcher is not behind
        return sorted(data.add_invoice(conn, job_scope.tenant, due_at="2026-11-01T00:00:00Z") for _ in range(2))


def assert_second_grant(store: onceonly.Store, name: str, token: int) -> None:
    state = store.inspect(name)
    assert state is not None and state.grant_number == 2 and state.token == token, state


def assert_overdue_once(jobs_db: str, scope: JobScope, invoices: list[str], token: int) -> None:
    with data.connect(jobs_db) as conn:
        effects = data.invoice_effects(conn, scope.tenant)
    assert effects["statuses"] == {"overdue": len(invoices)}
    assert [(h["invoice_id"], h["fence_token"]) for h in effects["history"]] == [(i, token) for i in invoices]
    assert effects["activity"] == len(invoices) and effects["notifications"] == len(invoices)


def test_a_killed_run_is_run_by_lambdas_first_retry(
        job_scope: JobScope, store: onceonly.Store, jobs_db: str, replicas: Replicas,
        overdue_invoices: list[str]) -> None:
    lease = scaled_lease("OverdueInvoicesFunction", job_scope)
    invocation = job_scope.invocation("overdue_invoices", scheduled_event("overdue_invoices", TICK), **lease)

    with table_locked(jobs_db, "invoices"):
        victim = replicas.start(invocation, name="attempt-1")
        wait_until_blocked(jobs_db, victim)
        held_past_its_lease(store, f"tick:{job_scope.job}:{TICK}", float(lease["TICK_LEASE_SECONDS"]))
        died = kill(victim)

    retry = replay_at(replicas, invocation, "attempt-2", died + RETRY_DELAYS[0])
    outcome = outcome_of(replicas, retry, "attempt-2")

    assert outcome["status"] == "ran", f"Lambda's retry did not run the dead run's tick: {outcome}"
    assert outcome["reclaimed"] is True
    assert_second_grant(store, f"tick:{job_scope.job}:{TICK}", outcome["token"])
    assert outcome["result"] == {"transitioned": len(overdue_invoices)}
    assert_overdue_once(jobs_db, job_scope, overdue_invoices, token=outcome["token"])


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_a_duplicate_during_a_healthy_run_is_skipped_past_the_first_lease(
        job_scope: JobScope, store: onceonly.Store, jobs_db: str, replicas: Replicas,
        overdue_invoices: list[str]) -> None:
    lease = scaled_lease("OverdueInvoicesFunction", job_scope)
    event = scheduled_event("overdue_invoices", TICK)

    with table_locked(jobs_db, "invoices"):
        running = replicas.start(job_scope.invocation("overdue_invoices", event, **lease), name="running")
        wait_until_blocked(jobs_db, running)
        sleep_past_two_leases(store, f"tick:{job_scope.job}:{TICK}", float(lease["TICK_LEASE_SECONDS"]))
        # EventBridge delivered the tick again (another id), long after the first lease would have ended
        duplicate = replicas.start(job_scope.invocation("overdue_invoices", scheduled_event(
            "overdue_invoices", TICK, "second-delivery"), **lease), name="duplicate")
        duplicate.join(30)
        assert not duplicate.is_alive(), "the duplicate took the tick and blocked on the running job's lock"
        skipped = outcome_of(replicas, duplicate, "duplicate")

    ran = outcome_of(replicas, running, "running")
    assert skipped == {"job": job_scope.job, "tick": TICK, "status": "skipped", "reason": "running"}
    assert ran["status"] == "ran" and ran["reclaimed"] is False
    state = store.inspect(f"tick:{job_scope.job}:{TICK}")
    assert state is not None and state.grant_number == 1 and state.token == ran["token"]
    assert_overdue_once(jobs_db, job_scope, overdue_invoices, token=ran["token"])


@pytest.mark.parametrize("store_url", ["redis"], indirect=True)
def test_a_retry_that_dies_too_is_run_by_the_second_retry(
        job_scope: JobScope, store: onceonly.Store, jobs_db: str, replicas: Replicas) -> None:
    with data.connect(jobs_db) as conn:
        schedule = data.add_schedule(conn, job_scope.tenant, cadence="weekly",
                                     anchor=date(2026, 11, 29) - timedelta(weeks=2))
    invocation = job_scope.invocation("recurring_billing", scheduled_event("recurring_billing", TICK),
                                      **scaled_lease("RecurringBillingFunction", job_scope))

    died = time.monotonic()
    for attempt, delay in ((1, 0.0), (2, RETRY_DELAYS[0])):
        with table_locked(jobs_db, "invoices"):
            proc = replay_at(replicas, invocation, f"attempt-{attempt}", died + delay)
            wait_until_blocked(jobs_db, proc)
            died = kill(proc)
    last = replay_at(replicas, invocation, "attempt-3", died + RETRY_DELAYS[1])
    outcome = outcome_of(replicas, last, "attempt-3")

    assert outcome["status"] == "ran" and outcome["reclaimed"] is True
    state = store.inspect(f"tick:{job_scope.job}:{TICK}")
    assert state is not None and state.grant_number == 3 and state.token == outcome["token"]
    assert outcome["result"] == {"generated": 3}
    assert data.generated_invoices(jobs_db, job_scope.tenant, schedule) == {
        "periods": ["2026-11-15", "2026-11-22", "2026-11-29"], "activity": 3, "notifications": 3}
