-- The notifications job's statements on the outbox (table notifications).
-- One "claimable at" time per row: when a pending row is due, or when a claim
-- runs out, so a crashed sender's rows come back by themselves.

-- name: give_up_abandoned --
-- In: max_attempts, tenant, given_up. Rows whose last allowed claim ran out
-- without an outcome (the sender crashed, or is only slow) end in `failed`
-- instead of being sent again; last_error = given_up marks the give-up, so that
-- holder can still record its outcome (mark_sent, mark_failed).
UPDATE notifications
   SET status = 'failed', last_error = %(given_up)s, updated_at = now()
 WHERE status = 'sending' AND claimable_at <= clock_timestamp() AND attempts >= %(max_attempts)s
   AND (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s::text)
RETURNING id;

-- name: claim --
-- In: tenant, max_attempts, limit, claim_ttl (seconds). Out: the claimed rows
-- with their new claim_token. SKIP LOCKED keeps concurrent claimers on disjoint
-- rows; the row lock re-checks claimable_at on rows changed since the
-- snapshot; MATERIALIZED stops the planner updating more rows than LIMIT.
WITH due AS MATERIALIZED (
    SELECT id FROM notifications
     WHERE status IN ('pending', 'sending') AND claimable_at <= clock_timestamp()
       AND attempts < %(max_attempts)s
       AND (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s::text)
     ORDER BY claimable_at, id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE notifications n
   SET status = 'sending', claim_token = n.claim_token + 1, attempts = n.attempts + 1,
       claimable_at = clock_timestamp() + make_interval(secs => %(claim_ttl)s), updated_at = now()
  FROM due
 WHERE n.id = due.id
RETURNING n.id, n.notification_key, n.recipient, n.subject, n.body_text, n.claim_token, n.attempts;

-- name: record_attempt --
-- In: id, token, outcome, error. The audit row of one send; a claim sends once.
INSERT INTO notification_attempts (notification_id, claim_token, outcome, error)
VALUES (%(id)s, %(token)s, %(outcome)s, %(error)s)
ON CONFLICT (notification_id, claim_token) DO NOTHING;

-- name: mark_sent --
-- In: id, token, message_id, given_up. Refused (no row) if the claim was
-- re-granted. A claim given up (give_up_abandoned) still takes its holder's
-- outcome: it was the last claim, so no other holder can have the row.
UPDATE notifications
   SET status = 'sent', sent_at = now(), provider_message_id = %(message_id)s, last_error = NULL,
       updated_at = now()
 WHERE id = %(id)s AND claim_token = %(token)s
   AND (status = 'sending' OR (status = 'failed' AND last_error = %(given_up)s))
RETURNING id;

-- name: mark_failed --
-- In: id, token, error, max_attempts, retry_in (seconds), given_up. Back to
-- pending with backoff, or `failed` (kept) after the last allowed attempt.
-- Refused (no row) if the claim was re-granted; taken on a given-up claim as
-- in mark_sent (the real error replaces the give-up's).
UPDATE notifications
   SET status = CASE WHEN attempts >= %(max_attempts)s THEN 'failed' ELSE 'pending' END,
       claimable_at = clock_timestamp() + make_interval(secs => %(retry_in)s),
       last_error = %(error)s, updated_at = now()
 WHERE id = %(id)s AND claim_token = %(token)s
   AND (status = 'sending' OR (status = 'failed' AND last_error = %(given_up)s))
RETURNING status;

-- name: cancel_if_moot --
-- In: id, token. Checked just before sending: an overdue e-mail whose invoice
-- is no longer overdue (paid or voided since it was queued) is cancelled
-- instead of sent. Out: a row if it was cancelled.
UPDATE notifications n
   SET status = 'cancelled', last_error = 'invoice no longer overdue', updated_at = now()
 WHERE n.id = %(id)s AND n.claim_token = %(token)s AND n.status = 'sending'
   AND n.kind = 'invoice.overdue'
   AND NOT EXISTS (SELECT 1 FROM invoices i WHERE i.id = n.invoice_id AND i.status = 'overdue')
RETURNING n.id;

-- name: release --
-- In: ids, tokens (arrays, pairwise). Claims a run will not send (it is near
-- its deadline) go back to pending at once, their attempt not counted.
UPDATE notifications n
   SET status = 'pending', attempts = n.attempts - 1, claimable_at = clock_timestamp(), updated_at = now()
  FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS c(id, token)
 WHERE n.id = c.id AND n.claim_token = c.token AND n.status = 'sending';
