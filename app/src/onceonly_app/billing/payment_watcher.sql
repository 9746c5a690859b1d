-- The payment watcher's statements. The cursor row (payment_cursors) is the
-- fence: a poller stamps its lease token once, and every transaction that
-- applies payments and moves the cursor first locks the row with that token.

-- name: stamp_cursor --
-- In: poller, token. Out: the stored cursor if this poller now holds the fence;
-- no row if a poller with a higher (or equal) token stamped first.
INSERT INTO payment_cursors AS c (poller, cursor, fence_token)
VALUES (%(poller)s, '', %(token)s)
ON CONFLICT (poller) DO UPDATE SET fence_token = EXCLUDED.fence_token, updated_at = now()
 WHERE c.fence_token < EXCLUDED.fence_token
RETURNING cursor;

-- name: hold_cursor --
-- In: poller, token. Out: the cursor, locked until the transaction ends, or no
-- row if a newer poller stamped (this one must not commit).
SELECT cursor FROM payment_cursors WHERE poller = %(poller)s AND fence_token = %(token)s FOR UPDATE;

-- name: advance_cursor --
-- In: poller, token, cursor, read_to (the ledger time the page was read up to,
-- or NULL). Run after hold_cursor in the same transaction. ledger_read_to only
-- moves up: the overdue job trusts that every payment before it was applied.
UPDATE payment_cursors
   SET cursor = %(cursor)s, updated_at = now(),
       ledger_read_to = greatest(ledger_read_to, %(read_to)s::timestamptz)
 WHERE poller = %(poller)s AND fence_token = %(token)s
RETURNING cursor;

-- name: receiving_accounts --
-- In: tenant (or NULL = all). Out: the accounts payments are received on, with their tenant.
SELECT account_id, tenant_id FROM payment_accounts
 WHERE %(tenant)s::text IS NULL OR tenant_id = %(tenant)s::text;

-- name: lock_invoice --
-- In: memo, tenant. Out: the invoice the memo names among the TENANT's
-- invoices (another tenant's invoice id matches nothing), locked until the
-- transaction ends, with what credited payments already cover of it (exactly)
-- and when its due day ends, as stored at issue (a payment at or after that
-- ledger time is late). The memo is matched trimmed and case-folded
-- (lower(id), indexed); an id equal to the memo as written wins over one that
-- differs only in case.
SELECT i.id, i.status, i.currency, i.amount_cents, billing_credited(i.id) AS credited_cents, i.due_day_ends_at
  FROM invoices i
 WHERE lower(i.id) = lower(btrim(%(memo)s)) AND i.tenant_id = %(tenant)s
 ORDER BY i.id = btrim(%(memo)s) DESC, i.id
 LIMIT 1
   FOR UPDATE OF i;

-- name: record_payment --
-- In: the payment's fields, its verdict, poller, token. Out: a row if the
-- payment is new. The operation id is the key: a payment seen again records
-- nothing, while several payments of one transaction are each recorded.
INSERT INTO payments (payment_id, transaction_hash, paging_token, operation_type, to_account, tenant_id,
                      asset_code, asset_issuer, amount, amount_cents, memo, invoice_id, outcome, reason, late,
                      poller, fence_token, paid_at)
VALUES (%(payment_id)s, %(transaction_hash)s, %(paging_token)s, %(operation_type)s, %(to_account)s,
        %(tenant)s, %(asset_code)s, %(asset_issuer)s, %(amount)s, %(amount_cents)s, %(memo)s, %(invoice_id)s,
        %(outcome)s, %(reason)s, %(late)s, %(poller)s, %(token)s, %(paid_at)s)
ON CONFLICT (payment_id) DO NOTHING
RETURNING payment_id;

-- name: record_payment_event --
-- In: payment_id, tenant, invoice_id, kind, detail (json). The activity event
-- of a payment that needs a person's eye (unmatched, partial, overpaid, late).
INSERT INTO activity_events (event_key, tenant_id, invoice_id, kind, detail)
VALUES (%(kind)s || ':' || %(payment_id)s, %(tenant)s, %(invoice_id)s, %(kind)s, %(detail)s::jsonb)
ON CONFLICT (event_key) DO NOTHING;

-- name: mark_paid --
-- In: invoice_id, paid_at (the completing payment's ledger time), job, token.
-- Out: the invoice if it moved to `paid` in this statement: it was open or
-- overdue and its credited payments now cover the amount (overpaid: they
-- exceed it), with its money as the merchant sees it (billing_invoice_amounts). The history row and
-- activity event come from the transition's RETURNING only.
WITH covered AS MATERIALIZED (
    SELECT i.id, i.status AS from_status FROM invoices i
     WHERE i.id = %(invoice_id)s AND i.status IN ('open', 'overdue')
       AND billing_credited(i.id) >= i.amount_cents
       FOR UPDATE
), paid AS (
    UPDATE invoices i
       SET status = 'paid', paid_at = %(paid_at)s, updated_at = now(),
           overpaid = billing_credited(i.id) > i.amount_cents
      FROM covered c
     WHERE i.id = c.id AND i.status = c.from_status
    RETURNING i.id, i.tenant_id, i.amount_cents, i.currency, i.paid_at, i.overpaid, c.from_status,
              billing_invoice_amounts(i.amount_cents, billing_credited(i.id)) AS amounts
), history AS (
    INSERT INTO invoice_status_history (invoice_id, from_status, to_status, job, fence_token)
    SELECT id, from_status, 'paid', %(job)s, %(token)s FROM paid
    ON CONFLICT (invoice_id, from_status, to_status) DO NOTHING
), activity AS (
    INSERT INTO activity_events (event_key, tenant_id, invoice_id, kind, detail)
    SELECT 'invoice.paid:' || id, tenant_id, id, 'invoice.paid',
           jsonb_build_object('amount_cents', amount_cents, 'currency', currency, 'paid_at', paid_at)
      FROM paid
    ON CONFLICT (event_key) DO NOTHING
)
SELECT id, tenant_id, amount_cents, currency, paid_at, overpaid, amounts FROM paid;
