"""The overdue-invoices job against PostgreSQL: which invoices move (only after
the due day ended in the tenant's time zone), what each transition records, the
e-mail's money, and the real handler's duplicate and malformed-event paths."""

from __future__ import annotations

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import onceonly
from onceonly_app.billing import overdue
from onceonly_app.runtime.budget import Budget, RunOutOfTimeError
from tests.support.functions.events import scheduled_event
from tests.support.jobs import jobs_data as data
from tests.support.jobs.jobs_helpers import make_scope
from tests.support.jobs.jobs_inprocess import run_tick
from tests.support.jobs.jobs_workers import Replicas


@pytest.fixture(autouse=True)
def ledger_read(jobs_db: str, unique: str) -> None:
    """The test's payment watcher (named like its overdue job) has read the
    whole ledger: these tests are about due days, not about waiting for it."""
    with data.connect(jobs_db) as conn:
        data.ledger_read(conn, unique, tenant=f"tenant-{unique}")


def test_moves_open_invoices_due_before_the_tick_and_records_each_once(
        pool: ConnectionPool, pg_store: onceonly.Store, jobs_db: str, unique: str) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        late = sorted(data.add_invoice(conn, tenant, due_at="2026-11-28T23:59:59Z") for _ in range(2))
        at_tick = data.add_invoice(conn, tenant, due_at="2026-11-29T02:00:00Z")  # not before the tick
        data.add_invoice(conn, tenant, due_at="2026-11-01T00:00:00Z", status="paid")
        data.add_invoice(conn, tenant, due_at="2026-11-01T00:00:00Z", status="draft")

    first = run_tick(pg_store, unique, "2026-11-29T02:00:00Z", lambda t: overdue.run(
        pool, t, watcher=unique, tenant=tenant))
    # the next day's tick moves the invoice that was due exactly at the first tick, nothing else again
    second = run_tick(pg_store, unique, "2026-11-30T02:00:00Z", lambda t: overdue.run(
        pool, t, watcher=unique, tenant=tenant))

    assert first["result"].transitioned == 2 and second["result"].transitioned == 1
    with data.connect(jobs_db) as conn:
        effects = data.invoice_effects(conn, tenant)
        emails = data.rows(conn, "SELECT notification_key, subject, status FROM notifications"
                                 " WHERE tenant_id = %s ORDER BY 1", tenant)
        ticks = data.rows(conn, "SELECT fence_token, result FROM job_ticks WHERE job = %s ORDER BY scheduled_time",
                          unique)
    assert effects["statuses"] == {"overdue": 3, "paid": 1, "draft": 1}
    assert sorted(h["invoice_id"] for h in effects["history"]) == sorted([*late, at_tick])
    assert {(h["from_status"], h["to_status"], h["job"]) for h in effects["history"]} == {
        ("open", "overdue", unique)}
    assert effects["activity"] == effects["activity_keys"] == 3
    assert [e["notification_key"] for e in emails] == sorted(f"invoice.overdue:{i}" for i in [*late, at_tick])
    assert all(e["status"] == "pending" and "is overdue" in e["subject"] for e in emails)
    assert ticks == [{"fence_token": 1, "result": {"transitioned": 2}},
                     {"fence_token": 1, "result": {"transitioned": 1}}]


def test_a_second_run_of_a_tick_finds_nothing_to_move(
        pool: ConnectionPool, pg_store: onceonly.Store, jobs_db: str, unique: str) -> None:
    """Without the tick lock (two job names), the conditional transition alone
    keeps the effects single."""
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        data.add_invoice(conn, tenant, due_at="2026-11-01T00:00:00Z")
    runs = [run_tick(pg_store, f"{unique}-{n}", "2026-11-29T02:00:00Z",
                     lambda t: overdue.run(pool, t, watcher=unique, tenant=tenant)) for n in range(2)]
    assert [r["result"].transitioned for r in runs] == [1, 0]
    with data.connect(jobs_db) as conn:
        effects = data.invoice_effects(conn, tenant)
    assert len(effects["history"]) == 1 and effects["activity"] == 1 and effects["notifications"] == 1


def test_real_handler_skips_a_duplicate_tick_and_refuses_a_malformed_event(
        postgres_url: str, jobs_db: str, moto_endpoint: str, ses_sender: str, unique: str,
        replicas: Replicas) -> None:
    scope = make_scope(jobs_db, postgres_url, moto_endpoint, ses_sender, unique)
    with data.connect(jobs_db) as conn:
        data.add_invoice(conn, scope.tenant, due_at="2026-11-01T00:00:00Z")
        data.ledger_read(conn, scope.job, tenant=scope.tenant)  # the scope's watcher (named like its jobs)
    tick = "2026-11-29T02:00:00Z"
    not_scheduled = {**scheduled_event("overdue_invoices", tick), "source": "aws.s3"}

    for name, event in (("first", scheduled_event("overdue_invoices", tick, "delivery-1")),
                        ("duplicate", scheduled_event("overdue_invoices", tick, "delivery-2")),
                        ("malformed", not_scheduled)):
        replicas.join(replicas.start(scope.invocation("overdue_invoices", event), name=name))

    assert replicas.record("first")["outcome"]["result"] == {"transitioned": 1}
    assert replicas.record("duplicate")["outcome"] == {"job": scope.job, "tick": tick, "status": "skipped",
                                                       "reason": "completed"}
    malformed = replicas.record("malformed")
    assert malformed["error"] == "InvalidEventError" and "not a scheduled event" in malformed["message"]
    with data.connect(jobs_db) as conn:
        effects = data.invoice_effects(conn, scope.tenant)
    assert len(effects["history"]) == 1 and effects["activity"] == 1 and effects["notifications"] == 1


def test_an_invoice_is_not_overdue_on_its_due_day(
        pool: ConnectionPool, pg_store: onceonly.Store, jobs_db: str, unique: str) -> None:
    """Due on 15 June (00:00 UTC, a UTC tenant): the 02:00 run on the 15th
    leaves it open, the run on the 16th moves it."""
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        invoice = data.add_invoice(conn, tenant, due_at="2024-06-15T00:00:00Z")

    def moved(when: str) -> int:
        return run_tick(pg_store, unique, when, lambda t: overdue.run(
            pool, t, watcher=unique, tenant=tenant))["result"].transitioned

    assert moved("2024-06-15T02:00:00Z") == 0
    assert moved("2024-06-16T02:00:00Z") == 1
    with data.connect(jobs_db) as conn:
        (email,) = data.rows(conn, "SELECT body_text FROM notifications WHERE invoice_id = %s", invoice)
    assert "was due on 2024-06-15 and is now overdue" in email["body_text"]


@pytest.mark.parametrize(("time_zone", "due_at", "still_open_at", "overdue_at"), [
    # due 15 June in Tokyo (UTC+9): the day ends at 15:00 UTC on the 15th
    ("Asia/Tokyo", "2026-06-15T00:00:00+09:00", "2026-06-15T02:00:00Z", "2026-06-16T02:00:00Z"),
    # due 15 June in Los Angeles (UTC-7): the day ends at 07:00 UTC on the 16th
    ("America/Los_Angeles", "2026-06-15T00:00:00-07:00", "2026-06-16T02:00:00Z", "2026-06-17T02:00:00Z"),
])
def test_the_due_day_ends_at_midnight_in_the_tenants_time_zone(
        pool: ConnectionPool, pg_store: onceonly.Store, jobs_db: str, unique: str, time_zone: str, due_at: str,
        still_open_at: str, overdue_at: str) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        data.set_time_zone(conn, tenant, time_zone)
        invoice = data.add_invoice(conn, tenant, due_at=due_at)

    def moved(when: str) -> int:
        return run_tick(pg_store, unique, when, lambda t: overdue.run(
            pool, t, watcher=unique, tenant=tenant))["result"].transitioned

    assert moved(still_open_at) == 0
    assert moved(overdue_at) == 1
    with data.connect(jobs_db) as conn:
        (email,) = data.rows(conn, "SELECT body_text FROM notifications WHERE invoice_id = %s", invoice)
    assert "was due on 2026-06-15" in email["body_text"]  # the due day as the tenant sees it


def test_an_unknown_time_zone_is_refused_when_stored(jobs_db: str, unique: str) -> None:
    with data.connect(jobs_db) as conn, pytest.raises(psycopg.errors.CheckViolation):
        data.set_time_zone(conn, f"tenant-{unique}", "Mars/Olympus_Mons")


@pytest.mark.parametrize(("currency", "amount_cents", "shown"), [
    ("USD", 123456, "1,234.56 USD"), ("JPY", 1500, "1,500 JPY"), ("KWD", 12345, "12.345 KWD")])
def test_the_overdue_email_shows_money_in_the_currencys_minor_unit(
        pool: ConnectionPool, pg_store: onceonly.Store, jobs_db: str, unique: str, currency: str,
        amount_cents: int, shown: str) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        invoice = data.add_invoice(conn, tenant, due_at="2026-11-01T00:00:00Z", amount_cents=amount_cents,
                                   currency=currency)
    run_tick(pg_store, unique, "2026-11-29T02:00:00Z", lambda t: overdue.run(
        pool, t, watcher=unique, tenant=tenant))
    with data.connect(jobs_db) as conn:
        (email,) = data.rows(conn, "SELECT body_text FROM notifications WHERE invoice_id = %s", invoice)
    assert f"for {shown} was due" in email["body_text"]


def test_a_run_near_its_deadline_stops_between_batches_and_the_retry_goes_on(
        pool: ConnectionPool, pg_store: onceonly.Store, jobs_db: str, unique: str) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        for _ in range(3):
            data.add_invoice(conn, tenant, due_at="2026-11-01T00:00:00Z")
    when = "2026-11-29T02:00:00Z"

    with pytest.raises(RunOutOfTimeError):
        run_tick(pg_store, unique, when, lambda t: overdue.run(
            pool, t, watcher=unique, tenant=tenant, batch_size=2, budget=Budget(lambda: 1.0)))
    with data.connect(jobs_db) as conn:
        assert data.invoice_effects(conn, tenant)["statuses"] == {"overdue": 2, "open": 1}  # the first batch stands
    retry = run_tick(pg_store, unique, when, lambda t: overdue.run(
        pool, t, watcher=unique, tenant=tenant, batch_size=2))

    assert retry["token"] == 2 and retry["result"].transitioned == 1
    with data.connect(jobs_db) as conn:
        effects = data.invoice_effects(conn, tenant)
    assert effects["statuses"] == {"overdue": 3} and effects["notifications"] == 3


def test_a_zero_invoice_is_settled_when_issued_and_never_dunned(
        pool: ConnectionPool, pg_store: onceonly.Store, jobs_db: str, unique: str) -> None:
    """A free plan or a 100 % discount: nothing is due, so nothing goes overdue."""
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        free = data.add_invoice(conn, tenant, due_at="2026-11-01T00:00:00Z", amount_cents=0)
        (issued,) = data.rows(conn, "SELECT status, paid_at IS NOT NULL AS settled FROM invoices WHERE id = %s",
                              free)

    run = run_tick(pg_store, unique, "2026-11-29T02:00:00Z", lambda t: overdue.run(
        pool, t, watcher=unique, tenant=tenant))

    assert issued == {"status": "paid", "settled": True}
    assert run["result"].transitioned == 0
    with data.connect(jobs_db) as conn:
        effects = data.invoice_effects(conn, tenant)
    assert effects["statuses"] == {"paid": 1} and effects["notifications"] == 0
