-- name: transition_overdue --
-- In: as_of (the tick's scheduled time), tenant (text or NULL = all), job,
-- token, limit. Out: the invoices that moved open -> overdue in this statement.
-- The transition is conditional (status = 'open' is re-checked on the locked
-- row), and the history row and activity event are written from its RETURNING
-- only, so an invoice some other run (or a payment) already moved yields no
-- row and no side effect. SKIP LOCKED passes invoices locked by a payment
-- being applied; they are looked at again by the next tick if still open.
WITH due AS MATERIALIZED (
    SELECT id FROM invoices
     WHERE status = 'open' AND due_at < %(as_of)s
       AND (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s::text)
     ORDER BY due_at, id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), moved AS (
    UPDATE invoices i
       SET status = 'overdue', updated_at = now()
      FROM due
     WHERE i.id = due.id AND i.status = 'open'
    RETURNING i.id, i.tenant_id, i.customer_email, i.amount_cents, i.currency, i.due_at
), history AS (
    INSERT INTO invoice_status_history (invoice_id, from_status, to_status, job, fence_token)
    SELECT id, 'open', 'overdue', %(job)s, %(token)s FROM moved
    ON CONFLICT (invoice_id, from_status, to_status) DO NOTHING
), activity AS (
    INSERT INTO activity_events (event_key, tenant_id, invoice_id, kind, detail)
    SELECT 'invoice.overdue:' || id, tenant_id, id, 'invoice.overdue',
           jsonb_build_object('due_at', due_at, 'amount_cents', amount_cents, 'currency', currency,
                              'job', %(job)s::text, 'fence_token', %(token)s::bigint)
      FROM moved
    ON CONFLICT (event_key) DO NOTHING
)
SELECT id, tenant_id, customer_email, amount_cents, currency, due_at FROM moved ORDER BY id;
