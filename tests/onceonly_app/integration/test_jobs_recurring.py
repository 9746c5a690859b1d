"""The recurring-billing job against PostgreSQL: one invoice per schedule and
period, catch-up of missed periods, a second generation that is a no-op,
paused periods skipped, cost by what is due, and bounded fenced batches."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import onceonly
from onceonly_app.billing import recurring
from onceonly_app.runtime.budget import Budget, RunOutOfTimeError
from tests.support.jobs import jobs_data as data
from tests.support.jobs.jobs_inprocess import run_tick


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


def test_periods_that_start_while_paused_are_skipped_not_billed_on_resume(
        pool: ConnectionPool, pg_store: onceonly.Store, jobs_db: str, unique: str) -> None:
    """Paused from 20 January, resumed on 20 May: February to May started while
    paused and are never billed; billing goes on with June."""
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        schedule = data.add_schedule(conn, tenant, cadence="monthly", anchor=date(2026, 1, 1))

    def generate(when: str) -> int:
        return run_tick(pg_store, unique, when, lambda t: recurring.run(pool, t, tenant=tenant))["result"].generated

    assert generate("2026-01-01T00:30:00Z") == 1
    with data.connect(jobs_db) as conn:
        conn.execute("INSERT INTO billing_schedule_pauses (schedule_id, paused_on, resumed_on)"
                     " VALUES (%s, '2026-01-20', '2026-05-20')", (schedule,))
    assert generate("2026-05-20T00:30:00Z") == 0
    assert generate("2026-06-01T00:30:00Z") == 1
    assert periods(jobs_db, schedule) == ["2026-01-01", "2026-06-01"]
    with data.connect(jobs_db) as conn:
        (state,) = data.rows(conn, "SELECT next_period, next_period_start FROM billing_schedules WHERE id = %s",
                             schedule)
    assert (state["next_period"], state["next_period_start"]) == (6, date(2026, 7, 1))


def test_switching_a_schedule_off_and_on_records_the_pause(
        pool: ConnectionPool, pg_store: onceonly.Store, jobs_db: str, unique: str) -> None:
    """Pausing is `active = false`, by any client: the pause window is written
    by the database, dated today (the tenant's date; UTC here); nothing is billed while paused, and the
    periods inside the window are skipped after the resume."""
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        today = data.rows(conn, "SELECT (now() AT TIME ZONE 'UTC')::date AS d")[0]["d"]
        schedule = data.add_schedule(conn, tenant, cadence="daily", anchor=today)
        conn.execute("UPDATE billing_schedules SET active = false WHERE id = %s", (schedule,))
    later = f"{today + timedelta(days=3):%Y-%m-%d}T00:30:00Z"
    paused = run_tick(pg_store, unique, later, lambda t: recurring.run(pool, t, tenant=tenant))
    with data.connect(jobs_db) as conn:
        conn.execute("UPDATE billing_schedules SET active = true WHERE id = %s", (schedule,))
        windows = data.rows(conn, "SELECT paused_on, resumed_on FROM billing_schedule_pauses"
                                  " WHERE schedule_id = %s", schedule)
        # as if the pause had begun two days ago and ended tomorrow
        conn.execute("UPDATE billing_schedule_pauses SET paused_on = %s, resumed_on = %s WHERE schedule_id = %s",
                     (today - timedelta(days=2), today + timedelta(days=1), schedule))
    resumed = run_tick(pg_store, f"{unique}-resumed", later, lambda t: recurring.run(pool, t, tenant=tenant))

    assert windows == [{"paused_on": today, "resumed_on": today}]
    assert paused["result"].generated == 0
    assert resumed["result"].generated == 3
    assert periods(jobs_db, schedule) == [f"{today + timedelta(days=d):%Y-%m-%d}" for d in (1, 2, 3)]


def test_a_run_costs_what_is_due_not_schedules_times_periods(pool: ConnectionPool, jobs_db: str,
                                                             unique: str) -> None:
    """The statement builds period rows only for the schedules that are due:
    one due schedule among fifty up-to-date ones costs a handful of rows (the
    old statement built 366 per active schedule, due or not)."""
    tenant = f"tenant-{unique}"
    tick_day = date(2026, 11, 29)
    with data.connect(jobs_db) as conn:
        for _ in range(50):
            data.add_schedule(conn, tenant, cadence="daily", anchor=tick_day + timedelta(days=10))
        data.add_schedule(conn, tenant, cadence="weekly", anchor=tick_day - timedelta(days=14))
    params = {"as_of": datetime.combine(tick_day, time(0, 30), UTC), "tenant": tenant,
              "schedules": recurring.SCHEDULES_PER_BATCH, "max_periods": recurring.PERIODS_PER_BATCH}

    with pool.connection() as conn, conn.transaction(force_rollback=True):
        (plan,) = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + recurring.SQL["generate_batch"],
                               params).fetchone()  # type: ignore[misc]

    def series(node: dict[str, Any]) -> list[tuple[int, int]]:
        """(loops, rows per loop) of each generate_series in the plan."""
        own = [(node["Actual Loops"], node["Actual Rows"])] if node.get("Function Name") == "generate_series" else []
        return own + [s for child in node.get("Plans", []) for s in series(child)]

    # built once, for the due schedule only: its three periods
    assert series(plan[0]["Plan"]) == [(1, 3)]


def test_a_long_catch_up_commits_in_batches_and_continues_on_the_ticks_retry(
        pool: ConnectionPool, pg_store: onceonly.Store, jobs_db: str, unique: str) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        schedule = data.add_schedule(conn, tenant, cadence="daily", anchor=date(2026, 8, 22))  # 100 days due
    when = "2026-11-29T00:30:00Z"
    no_time_left = Budget(lambda: 1.0)

    with pytest.raises(RunOutOfTimeError):  # after its first batch, the run has no time for another
        run_tick(pg_store, unique, when, lambda t: recurring.run(pool, t, tenant=tenant, budget=no_time_left))
    assert len(periods(jobs_db, schedule)) == recurring.PERIODS_PER_BATCH  # the first batch stands
    retry = run_tick(pg_store, unique, when, lambda t: recurring.run(pool, t, tenant=tenant))

    assert retry["token"] == 2 and retry["result"].generated == 100 - recurring.PERIODS_PER_BATCH
    assert retry["result"].batches == 3
    assert len(periods(jobs_db, schedule)) == 100
    with data.connect(jobs_db) as conn:
        effects = data.invoice_effects(conn, tenant)
    assert effects["activity"] == 100 and effects["notifications"] == 100


class NewerRunStampsBetweenBatches(Budget):
    """A budget that, when asked between batches, lets a newer run of the tick
    stamp the fence first: the next batch of the older run must be refused."""

    def __init__(self, jobs_db: str, job: str, when: str) -> None:
        super().__init__(lambda: 1e9)
        self.stamp = (jobs_db, job, when)

    def allows(self, seconds: float) -> bool:
        jobs_db, job, when = self.stamp
        with data.connect(jobs_db) as conn:
            conn.execute("UPDATE job_ticks SET fence_token = fence_token + 1 WHERE job = %s AND scheduled_time = %s",
                         (job, when))
        return True


def test_a_batch_of_a_run_that_lost_its_tick_is_refused(
        pool: ConnectionPool, pg_store: onceonly.Store, jobs_db: str, unique: str) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        schedule = data.add_schedule(conn, tenant, cadence="daily", anchor=date(2026, 8, 22))
    when = "2026-11-29T00:30:00Z"

    report = run_tick(pg_store, unique, when, lambda t: recurring.run(
        pool, t, tenant=tenant, budget=NewerRunStampsBetweenBatches(jobs_db, unique, when)))

    assert report["status"] == "superseded"
    assert len(periods(jobs_db, schedule)) == recurring.PERIODS_PER_BATCH  # only the batch before the stamp


def test_a_los_angeles_customer_paused_late_on_31_may_is_not_billed_for_june(
        pool: ConnectionPool, pg_store: onceonly.Store, jobs_db: str, unique: str) -> None:
    """June's period starts on 1 June in Los Angeles: the 00:30 UTC run on 1 June
    (17:30 on 31 May there) bills May only; the customer pauses at 23:59 local
    on 31 May, so the runs after local midnight skip June."""
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        data.set_time_zone(conn, tenant, "America/Los_Angeles")
        schedule = data.add_schedule(conn, tenant, cadence="monthly", anchor=date(2026, 5, 1))

    def generate(when: str) -> int:
        return run_tick(pg_store, unique, when, lambda t: recurring.run(pool, t, tenant=tenant))["result"].generated

    assert generate("2026-06-01T00:30:00Z") == 1
    assert periods(jobs_db, schedule) == ["2026-05-01"]
    with data.connect(jobs_db) as conn:  # the pause as the database dates it at 23:59 local on 31 May
        conn.execute("INSERT INTO billing_schedule_pauses (schedule_id, paused_on) VALUES (%s, '2026-05-31')",
                     (schedule,))
    assert generate("2026-06-02T00:30:00Z") == 0
    assert periods(jobs_db, schedule) == ["2026-05-01"]


@pytest.mark.parametrize(("tick", "last_period"), [
    # 8 March 2026: clocks go forward; local midnight is still PST (08:00 UTC)
    ("2026-03-08T07:59:00Z", "2026-03-07"), ("2026-03-08T08:00:00Z", "2026-03-08"),
    # 9 March: the first midnight in PDT (07:00 UTC)
    ("2026-03-09T06:59:00Z", "2026-03-08"), ("2026-03-09T07:00:00Z", "2026-03-09"),
    # 1 November 2026: clocks go back; midnight is still PDT (07:00 UTC), the next one PST (08:00 UTC)
    ("2026-11-01T06:59:00Z", "2026-10-31"), ("2026-11-01T07:00:00Z", "2026-11-01"),
    ("2026-11-02T07:59:00Z", "2026-11-01"), ("2026-11-02T08:00:00Z", "2026-11-02"),
])
def test_a_daily_period_starts_at_local_midnight_across_daylight_saving(
        pool: ConnectionPool, pg_store: onceonly.Store, jobs_db: str, unique: str, tick: str,
        last_period: str) -> None:
    tenant = f"tenant-{unique}"
    anchor = date.fromisoformat(last_period) - timedelta(days=2)
    with data.connect(jobs_db) as conn:
        data.set_time_zone(conn, tenant, "America/Los_Angeles")
        schedule = data.add_schedule(conn, tenant, cadence="daily", anchor=anchor)

    run_tick(pg_store, unique, tick, lambda t: recurring.run(pool, t, tenant=tenant))

    assert periods(jobs_db, schedule)[-1] == last_period


def test_a_pause_is_dated_in_the_tenants_time_zone(jobs_db: str, unique: str) -> None:
    """Of UTC+14 and UTC-11 one always has another date than UTC: the pause
    switched on now is dated by that zone's calendar, not UTC's."""
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        utc_today, zone, local_today = next(
            (r["utc"], z, r["local"]) for z in ("Pacific/Kiritimati", "Pacific/Pago_Pago")
            for r in data.rows(conn, "SELECT (now() AT TIME ZONE 'UTC')::date AS utc,"
                                     " (now() AT TIME ZONE %s)::date AS local", z) if r["utc"] != r["local"])
        data.set_time_zone(conn, tenant, zone)
        schedule = data.add_schedule(conn, tenant, cadence="daily", anchor=utc_today)
        conn.execute("UPDATE billing_schedules SET active = false WHERE id = %s", (schedule,))
        conn.execute("UPDATE billing_schedules SET active = true WHERE id = %s", (schedule,))
        windows = data.rows(conn, "SELECT paused_on, resumed_on FROM billing_schedule_pauses WHERE schedule_id = %s",
                            schedule)
    assert windows == [{"paused_on": local_today, "resumed_on": local_today}]


def test_a_free_plans_invoice_is_settled_when_generated(
        pool: ConnectionPool, pg_store: onceonly.Store, jobs_db: str, unique: str) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        schedule = data.add_schedule(conn, tenant, cadence="monthly", anchor=date(2026, 11, 1), amount_cents=0)

    run_tick(pg_store, unique, "2026-11-01T00:30:00Z", lambda t: recurring.run(pool, t, tenant=tenant))

    with data.connect(jobs_db) as conn:
        (invoice,) = data.rows(conn, "SELECT status, paid_at IS NOT NULL AS settled FROM invoices"
                                     " WHERE schedule_id = %s", schedule)
        (email,) = data.rows(conn, "SELECT body_text FROM notifications WHERE tenant_id = %s", tenant)
    assert invoice == {"status": "paid", "settled": True}
    assert email["body_text"].endswith("for 0.00 USD (period starting 2026-11-01) is settled: nothing is due.")


def test_a_run_waits_for_a_schedule_an_earlier_ticks_run_holds_and_bills_its_own_day(
        pool: ConnectionPool, pg_store: onceonly.Store, jobs_db: str, unique: str) -> None:
    """Two ticks' runs at once (yesterday's, retried late, beside today's): the
    earlier one holds the schedule while it generates up to its own day. Today's
    run must not leave today's period to tomorrow's tick (a day late): it waits
    for the holder to commit, then generates it."""
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        schedule = data.add_schedule(conn, tenant, cadence="daily", anchor=date(2026, 11, 28))
    yesterday = {"as_of": "2026-11-28T00:30:00Z", "tenant": tenant, "schedules": 10, "max_periods": 31}
    with psycopg.connect(jobs_db) as holder:  # yesterday's run, inside its batch's transaction
        assert len(holder.execute(recurring.SQL["generate_batch"], yesterday).fetchall()) == 1
        today: dict[str, Any] = {}
        run = threading.Thread(target=lambda: today.update(run_tick(
            pg_store, unique, "2026-11-29T00:30:00Z", lambda t: recurring.run(pool, t, tenant=tenant))))
        run.start()
        run.join(timeout=1.5)
        assert run.is_alive(), f"today's run ended while the schedule was held: {today}"
        holder.commit()
    run.join(timeout=30)
    assert not run.is_alive()
    assert today["result"].generated == 1
    assert periods(jobs_db, schedule) == ["2026-11-28", "2026-11-29"]
