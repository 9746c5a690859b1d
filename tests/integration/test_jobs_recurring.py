"""The recurring-billing job against PostgreSQL: one invoice per schedule and
period, catch-up of missed periods, and a second generation that is a no-op."""

from __future__ import annotations

from datetime import date

from psycopg_pool import ConnectionPool

import onceonly
from onceonly_app.billing import recurring
from tests.support import jobs_data as data
from tests.support.jobs_inprocess import run_tick

pytest_plugins = ("tests.support.jobs_fixtures",)


def periods(jobs_db: str, schedule: str) -> list[str]:
    with data.connect(jobs_db) as conn:
        return [r["period_key"] for r in data.rows(
            conn, "SELECT period_key FROM invoices WHERE schedule_id = %s ORDER BY period_key", schedule)]


def test_catch_up_makes_one_invoice_per_missed_period_not_per_run(
        pool: ConnectionPool, pg_store: onceonly.Store, jobs_db: str, unique: str) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        schedule = data.add_schedule(conn, tenant, cadence="daily", anchor=date(2026, 11, 25))

    def generate(job: str, when: str) -> int:
        return run_tick(pg_store, job, when, lambda t: recurring.run(pool, t, tenant=tenant))["result"].generated

    assert generate(unique, "2026-11-29T00:30:00Z") == 5  # 25th to 29th: four missed days and today
    assert generate(f"{unique}-again", "2026-11-29T00:30:00Z") == 0  # another run of the day: the key refuses
    assert generate(unique, "2026-11-30T00:30:00Z") == 1
    assert periods(jobs_db, schedule) == [f"2026-11-{d}" for d in range(25, 31)]
    with data.connect(jobs_db) as conn:
        effects = data.invoice_effects(conn, tenant)
        (state,) = data.rows(conn, "SELECT next_period FROM billing_schedules WHERE id = %s", schedule)
        due = data.rows(conn, "SELECT to_char(due_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS d FROM invoices"
                              " WHERE schedule_id = %s AND period_key = '2026-11-30'", schedule)
    assert effects["statuses"] == {"open": 6}
    assert effects["activity"] == 6 and effects["notifications"] == 6
    assert state["next_period"] == 6
    assert due == [{"d": "2026-12-14"}]  # period start + due_days (14)


def test_monthly_periods_follow_the_anchor_without_drift(
        pool: ConnectionPool, pg_store: onceonly.Store, jobs_db: str, unique: str) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        schedule = data.add_schedule(conn, tenant, cadence="monthly", anchor=date(2026, 1, 31))
        ended = data.add_schedule(conn, tenant, cadence="weekly", anchor=date(2026, 3, 1))
        conn.execute("UPDATE billing_schedules SET ends_on = '2026-03-10' WHERE id = %s", (ended,))

    run_tick(pg_store, unique, "2026-04-15T00:30:00Z", lambda t: recurring.run(pool, t, tenant=tenant))

    assert periods(jobs_db, schedule) == ["2026-01-31", "2026-02-28", "2026-03-31"]
    assert periods(jobs_db, ended) == ["2026-03-01", "2026-03-08"]
