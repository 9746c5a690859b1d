-- name: transition_overdue --
-- In: as_of (the tick's scheduled time), tenant (text or NULL = all), watcher
-- (the payment watcher's job name: its feeds' cursors are WATCHER:ACCOUNT), job, token, limit. Out: the invoices
-- that moved open -> overdue in this statement, with their due day (due_on) in
-- the tenant's time zone and what credited payments already cover of them.
-- An invoice is overdue once its due day has ENDED: due_day_ends_at, midnight
-- after its due date (due_on) in the zone it was issued in, both stored when
-- it was issued (0010_billing_dates_and_balances.sql), so a later change of the
-- tenant's zone moves no promised date. An invoice due on the 15th is still
-- payable all of the 15th and moves on the first run after that midnight.
-- AND only once the payment watcher has read the ledger past that end on
-- every feed of the tenant's receiving accounts (billing_tenant_read_to: each
-- feed's payment_cursors.ledger_read_to, capped at what its source ingested;
-- NULL for a tenant with no account): a payment made on the due day but not
-- yet seen (the payments API down or lagging, the watcher behind) holds the
-- invoice open instead of dunning the customer; the next run moves it if it
-- is still open. A tenant no feed covers is never dunned.
-- The transition is conditional (status = 'open' is re-checked on the locked
-- row), and the history row and activity event are written from its RETURNING
-- only, so an invoice some other run (or a payment) already moved yields no
-- row and no side effect. SKIP LOCKED passes invoices locked by a payment
-- being applied; they are looked at again by the next tick if still open.
WITH due AS MATERIALIZED (
    SELECT i.id, i.due_on
      FROM invoices i
     WHERE i.status = 'open' AND i.due_day_ends_at <= %(as_of)s
       AND i.due_day_ends_at <= billing_tenant_read_to(%(watcher)s, i.tenant_id)
       AND (%(tenant)s::text IS NULL OR i.tenant_id = %(tenant)s::text)
     ORDER BY i.due_day_ends_at, i.id
     LIMIT %(limit)s
       FOR UPDATE OF i SKIP LOCKED
), moved AS (
    UPDATE invoices i
       SET status = 'overdue', updated_at = now()
      FROM due
     WHERE i.id = due.id AND i.status = 'open'
    RETURNING i.id, i.tenant_id, i.customer_email, i.amount_cents, i.currency, i.due_at, due.due_on,
              billing_credited(i.id) AS credited_cents
), history AS (
    INSERT INTO invoice_status_history (invoice_id, from_status, to_status, job, fence_token)
    SELECT id, 'open', 'overdue', %(job)s, %(token)s FROM moved
    ON CONFLICT (invoice_id, from_status, to_status) DO NOTHING
), activity AS (
    INSERT INTO activity_events (event_key, tenant_id, invoice_id, kind, detail)
    SELECT 'invoice.overdue:' || id, tenant_id, id, 'invoice.overdue',
           jsonb_build_object('due_at', due_at, 'due_on', due_on, 'amount_cents', amount_cents,
                              'currency', currency, 'job', %(job)s::text, 'fence_token', %(token)s::bigint)
      FROM moved
    ON CONFLICT (event_key) DO NOTHING
)
SELECT id, tenant_id, customer_email, amount_cents, currency, due_at, due_on, credited_cents,
       billing_invoice_amounts(amount_cents, credited_cents) AS amounts
  FROM moved ORDER BY id;

-- name: held_for_payments --
-- In: as_of, tenant, watcher, grace (seconds). Out: how many open invoices
-- are held back (not dunned) because what the watcher has read of the ledger
-- is more than `grace` behind as_of: genuinely waiting on a lagging feed (the
-- payments API down or behind, the watcher behind). A due day that ended
-- within the grace is held too, but not counted: a feed that is up to date
-- is always a minute or so behind the clock.
SELECT count(*) FROM invoices i
 WHERE i.status = 'open' AND i.due_day_ends_at <= %(as_of)s
   AND coalesce(billing_tenant_read_to(%(watcher)s, i.tenant_id), '-infinity')
       < %(as_of)s::timestamptz - make_interval(secs => %(grace)s)
   AND i.due_day_ends_at > coalesce((SELECT c.ledger_read_to FROM payment_cursors c WHERE c.poller = %(watcher)s),
                                    '-infinity')
   AND (%(tenant)s::text IS NULL OR i.tenant_id = %(tenant)s::text);
