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
-- In: poller, token, cursor. Run after hold_cursor in the same transaction.
UPDATE payment_cursors SET cursor = %(cursor)s, updated_at = now()
 WHERE poller = %(poller)s AND fence_token = %(token)s
RETURNING cursor;

-- name: record_payment --
-- In: the payment's fields, poller, token. Out: the payment if it is new (the
-- transaction hash is the key: a payment seen again records nothing) with the
-- invoice its memo names, if that invoice exists.
INSERT INTO payments (transaction_hash, payment_id, paging_token, invoice_id, amount_cents, asset_code,
                      memo, poller, fence_token, paid_at)
VALUES (%(transaction_hash)s, %(payment_id)s, %(paging_token)s,
        (SELECT id FROM invoices WHERE id = %(memo)s), %(amount_cents)s, %(asset_code)s, %(memo)s,
        %(poller)s, %(token)s, %(created_at)s)
ON CONFLICT (transaction_hash) DO NOTHING
RETURNING transaction_hash, invoice_id;

-- name: mark_paid --
-- In: invoice_id, job, token. Out: the invoice if it moved to `paid` in this
-- statement: it was open or overdue and its payments now cover the amount.
-- The history row and activity event come from the transition's RETURNING only.
WITH covered AS MATERIALIZED (
    SELECT i.id, i.status AS from_status FROM invoices i
     WHERE i.id = %(invoice_id)s AND i.status IN ('open', 'overdue')
       AND (SELECT coalesce(sum(p.amount_cents), 0) FROM payments p WHERE p.invoice_id = i.id)
           >= i.amount_cents
       FOR UPDATE
), paid AS (
    UPDATE invoices i
       SET status = 'paid', paid_at = now(), updated_at = now()
      FROM covered c
     WHERE i.id = c.id AND i.status = c.from_status
    RETURNING i.id, i.tenant_id, i.amount_cents, i.currency, i.paid_at, c.from_status
), history AS (
    INSERT INTO invoice_status_history (invoice_id, from_status, to_status, job, fence_token)
    SELECT id, from_status, 'paid', %(job)s, %(token)s FROM paid
    ON CONFLICT (invoice_id, from_status, to_status) DO NOTHING
), activity AS (
    INSERT INTO activity_events (event_key, tenant_id, invoice_id, kind, detail)
    SELECT 'invoice.paid:' || id, tenant_id, id, 'invoice.paid',
           jsonb_build_object('amount_cents', amount_cents, 'currency', currency)
      FROM paid
    ON CONFLICT (event_key) DO NOTHING
)
SELECT id, tenant_id, amount_cents, currency, paid_at FROM paid;
