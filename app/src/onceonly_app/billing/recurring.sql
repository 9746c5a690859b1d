-- The recurring-billing job's statements. Period k of a schedule starts at
-- billing_period_start(anchor, cadence, k); next_period is the high-water mark
-- (the first period not yet generated) and next_period_start its start date, a
-- generated column with a partial index, so the due schedules are found by one
-- index range scan: a run costs what is due, not schedules x periods.
-- Dates are the tenant's (billing_local_day): a period starts at midnight of
-- its start date in the tenant's time zone. The index bound is the latest date
-- anywhere (UTC+14, Pacific/Kiritimati); each schedule is then held to its own.

-- name: generate_batch --
-- In: as_of (the tick's scheduled time), tenant (text or NULL = all), schedules
-- (schedules per batch), max_periods (periods per schedule and batch). Out: the
-- invoices created by this statement, with their due day.
-- Each picked schedule gets one invoice per due period from next_period on (a
-- schedule that missed runs gets one per missed period), except periods that
-- start inside a pause (billing_schedule_pauses): those are skipped for good.
-- The unique (schedule_id, period_key) makes a second generation, concurrent
-- or later, a no-op; the activity event is written only for invoices this
-- statement created; next_period only moves up, past skipped periods too.
-- That key alone is the arbiter, although the id is derived from the same
-- pair: the schedule's row lock (picked) lets one statement at a time insert
-- its periods, so no racing insert can meet the primary key first, and a
-- primary key held by another period would be a fault to raise, not skip.
-- The due day is counted from the day the invoice is issued, not from the
-- period start: due_on = max(period start, the tick's local day) + due_days,
-- so an invoice issued late (a lost tick, an outage) is never born overdue.
-- It is stored as that date (invoices.due_on; the trigger of
-- 0010_billing_dates_and_balances.sql fills due_at and the day's end in the
-- tenant's zone as of issue).
WITH picked AS MATERIALIZED (
    SELECT id FROM billing_schedules
     WHERE active AND next_period_start <= (%(as_of)s::timestamptz AT TIME ZONE 'Pacific/Kiritimati')::date
       AND next_period_start <= billing_local_day(%(as_of)s, tenant_id)
       AND (ends_on IS NULL OR next_period_start <= ends_on)
       AND (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s::text)
     ORDER BY next_period_start, id
     LIMIT %(schedules)s
       FOR UPDATE SKIP LOCKED
), periods AS MATERIALIZED (
    -- at most the periods up to the tenant's today (a month is at least 28 days) and max_periods
    SELECT s.id AS schedule_id, s.tenant_id, s.customer_email, s.amount_cents, s.currency, s.due_days,
           s.ends_on, p.k, d.today,
           billing_period_start(s.anchor, s.cadence, p.k) AS period_start
      FROM picked
      JOIN billing_schedules s ON s.id = picked.id
     CROSS JOIN LATERAL (SELECT billing_local_day(%(as_of)s, s.tenant_id) AS today) d
     CROSS JOIN LATERAL generate_series(
           s.next_period,
           s.next_period - 1 + least(%(max_periods)s::integer,
               (d.today - s.next_period_start)
                 / CASE s.cadence WHEN 'daily' THEN 1 WHEN 'weekly' THEN 7 ELSE 28 END + 1)) AS p(k)
), due AS MATERIALIZED (
    SELECT * FROM periods
     WHERE period_start <= today AND (ends_on IS NULL OR period_start <= ends_on)
), billable AS (
    SELECT * FROM due d
     WHERE NOT EXISTS (SELECT 1 FROM billing_schedule_pauses p
                        WHERE p.schedule_id = d.schedule_id AND d.period_start >= p.paused_on
                          AND (p.resumed_on IS NULL OR d.period_start < p.resumed_on))
), created AS (
    INSERT INTO invoices (id, tenant_id, customer_email, amount_cents, currency, status, due_on,
                          schedule_id, period_key)
    SELECT 'inv_' || left(md5(schedule_id || '/' || to_char(period_start, 'YYYY-MM-DD')), 24),
           tenant_id, customer_email, amount_cents, currency, 'open',
           greatest(period_start, today) + due_days,
           schedule_id, to_char(period_start, 'YYYY-MM-DD')
      FROM billable
    ON CONFLICT (schedule_id, period_key) DO NOTHING
    RETURNING id, tenant_id, customer_email, amount_cents, currency, due_at, due_on, schedule_id, period_key
), activity AS (
    INSERT INTO activity_events (event_key, tenant_id, invoice_id, kind, detail)
    SELECT 'invoice.created:' || id, tenant_id, id, 'invoice.created',
           jsonb_build_object('schedule_id', schedule_id, 'period_key', period_key,
                              'amount_cents', amount_cents, 'currency', currency)
      FROM created
    ON CONFLICT (event_key) DO NOTHING
), advanced AS (
    UPDATE billing_schedules s
       SET next_period = d.next_period
      FROM (SELECT schedule_id, max(k) + 1 AS next_period FROM due GROUP BY schedule_id) d
     WHERE s.id = d.schedule_id AND s.next_period < d.next_period
)
SELECT c.id, c.tenant_id, c.customer_email, c.amount_cents, c.currency, c.due_at, c.schedule_id, c.period_key,
       c.due_on
  FROM created c
 ORDER BY c.schedule_id, c.period_key;

-- name: any_due --
-- In: as_of, tenant. Out: a row if some schedule still has a period due by this
-- tick, locked by another transaction or not. Another run holding a schedule
-- may be the run of an earlier tick, which generates it only up to that tick's
-- day: its later periods are this run's, so the run goes on (and waits for the
-- holder: generate_batch skips the schedule until its lock is released).
SELECT 1 FROM billing_schedules
 WHERE active AND next_period_start <= (%(as_of)s::timestamptz AT TIME ZONE 'Pacific/Kiritimati')::date
   AND next_period_start <= billing_local_day(%(as_of)s, tenant_id)
   AND (ends_on IS NULL OR next_period_start <= ends_on)
   AND (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s::text)
 LIMIT 1;
