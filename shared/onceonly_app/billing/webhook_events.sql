-- The webhook outbox (table webhook_outbox): invoice events fanned out to the
-- enabled subscriptions in the transaction of the change, sent to the
-- dispatcher's SQS queue afterwards. webhook_subscriptions belongs to the
-- webhook schema (0001_webhooks.sql).

-- name: fan_out --
-- In: event_id, event_type, tenant_id, payload (json). One row per enabled
-- subscription; a repeated event (same event_id) adds nothing.
INSERT INTO webhook_outbox (event_id, webhook_id, event_type, tenant_id, payload)
SELECT %(event_id)s, s.id, %(event_type)s, %(tenant_id)s, %(payload)s::jsonb
  FROM webhook_subscriptions s
 WHERE s.enabled
ON CONFLICT (webhook_id, event_id) DO NOTHING;

-- name: lock_unsent --
-- In: tenant (or NULL), limit. Out: unsent rows, locked until the transaction
-- ends; SKIP LOCKED lets two flushing runs send disjoint rows.
SELECT event_id, webhook_id, event_type, payload
  FROM webhook_outbox
 WHERE sent_at IS NULL AND (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s::text)
 ORDER BY created_at, event_id, webhook_id
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED;

-- name: mark_sent --
-- In: event_id, webhook_id.
UPDATE webhook_outbox SET sent_at = now(), send_count = send_count + 1
 WHERE event_id = %(event_id)s AND webhook_id = %(webhook_id)s;
