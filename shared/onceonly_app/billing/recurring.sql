-- name: generate_due_invoices --
-- In: as_of (date: the tick's day, UTC), tenant (text or NULL = all),
-- max_periods (periods looked at per schedule and run). Out: the invoices
-- created by this statement.
-- Period k of a schedule starts at anchor + k * cadence (computed from the
-- anchor, so monthly periods do not drift: Jan 31, Feb 28, Mar 31). Every
-- period from next_period up to as_of is due: a schedule that missed runs gets
-- one invoice per missed period. The unique (schedule_id, period_key) makes a
-- second generation, concurrent or later, a no-op; the activity event is
-- written only for invoices this statement created; next_period only moves up.
WITH periods AS MATERIALIZED (
    SELECT s.id AS schedule_id, s.tenant_id, s.customer_email, s.amount_cents, s.currency, s.due_days,
           s.ends_on, p.k,
           (s.anchor + p.k * CASE s.cadence WHEN 'daily' THEN interval '1 day'
                                            WHEN 'weekly' THEN interval '7 days'
                                            ELSE interval '1 month' END)::date AS period_start
      FROM billing_schedules s
     CROSS JOIN LATERAL generate_series(s.next_period, s.next_period + %(max_periods)s - 1) AS p(k)
     WHERE s.active AND (%(tenant)s::text IS NULL OR s.tenant_id = %(tenant)s::text)
), due AS MATERIALIZED (
    SELECT * FROM periods
     WHERE period_start <= %(as_of)s::date AND (ends_on IS NULL OR period_start <= ends_on)
), created AS (
    INSERT INTO invoices (id, tenant_id, customer_email, amount_cents, currency, status, due_at,
                          schedule_id, period_key)
    SELECT 'inv_' || left(md5(schedule_id || '/' || to_char(period_start, 'YYYY-MM-DD')), 24),
           tenant_id, customer_email, amount_cents, currency, 'open',
           (period_start + due_days)::timestamp AT TIME ZONE 'UTC',
           schedule_id, to_char(period_start, 'YYYY-MM-DD')
      FROM due
    ON CONFLICT (schedule_id, period_key) DO NOTHING
    RETURNING id, tenant_id, customer_email, amount_cents, currency, due_at, schedule_id, period_key
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
SELECT id, tenant_id, customer_email, amount_cents, currency, due_at, schedule_id, period_key
  FROM created ORDER BY schedule_id, period_key;
