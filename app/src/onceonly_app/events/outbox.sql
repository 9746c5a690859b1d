-- The webhook outbox (table webhook_outbox): invoice events fanned out to the
-- subscriptions of the event's tenant that are not deleted in the transaction of the change,
-- sent to the dispatcher's SQS queue afterwards. webhook_subscriptions belongs
-- to the webhook schema (0001_webhooks.sql, tenants: 0004_webhook_tenants.sql).

-- name: fan_out --
-- In: event_id, event_type, tenant_id, payload (json). One row per subscription
-- OF THE EVENT'S TENANT that is not deleted, disabled ones too: their deliveries
-- are held until the subscription is enabled, so no event is lost meanwhile (a
-- subscription without a tenant gets nothing); a repeated event (same
-- event_id) adds nothing, and neither does a subscription whose filter
-- (event_types, NULL: every type) leaves the type out: the filter as committed
-- when the statement starts decides, so a filter change applies to the events
-- fanned out after it. The event takes one
-- number of webhook_event_sequence here, in the transaction of the change: two
-- changes of one invoice hold its row lock in turn, so the later one takes the
-- larger number (the CTE is evaluated once: one number per event).
WITH seq AS (SELECT nextval('webhook_event_sequence') AS n)
INSERT INTO webhook_outbox (event_id, webhook_id, event_type, tenant_id, payload, event_sequence)
SELECT %(event_id)s, s.id, %(event_type)s, %(tenant_id)s, %(payload)s::jsonb, seq.n
  FROM webhook_subscriptions s CROSS JOIN seq
 WHERE s.deleted_at IS NULL AND s.tenant_id = %(tenant_id)s
   AND (s.event_types IS NULL OR %(event_type)s = ANY (s.event_types))
ON CONFLICT (webhook_id, event_id) DO NOTHING;

-- name: lock_unsent --
-- In: tenant (or NULL), limit. Out: unsent rows, locked until the transaction
-- ends, in event sequence order (not created_at: a transaction's start time);
-- SKIP LOCKED lets two flushing runs send disjoint rows.
SELECT event_id, webhook_id, tenant_id, event_type, payload, created_at, event_sequence
  FROM webhook_outbox
 WHERE sent_at IS NULL AND (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s::text)
 ORDER BY event_sequence NULLS FIRST, created_at, event_id, webhook_id
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED;

-- name: mark_sent --
-- In: event_id, webhook_id.
UPDATE webhook_outbox SET sent_at = now(), send_count = send_count + 1
 WHERE event_id = %(event_id)s AND webhook_id = %(webhook_id)s;
