-- A subscription's health (endpoint_health.py): the start of its failing
-- period, its automatic disable, and the operational notices (webhook events
-- to the tenant's operational subscriptions, an e-mail to its contact).

-- name: operational_subscriptions --
-- In: tenant_id, event_type. Out: the tenant's subscriptions not deleted whose
-- filter NAMES the operational event type (a subscription to every type, NULL,
-- is a business endpoint and gets none).
SELECT id FROM webhook_subscriptions
 WHERE tenant_id = %(tenant_id)s AND deleted_at IS NULL AND %(event_type)s = ANY (event_types)
 ORDER BY id;

-- name: start_failing --
-- In: webhook_id, now (epoch: the attempt's clock). The first failure since a
-- success starts the failing period; a later one changes nothing.
UPDATE webhook_subscriptions SET failing_since = to_timestamp(%(now)s::float8)
 WHERE id = %(webhook_id)s AND failing_since IS NULL AND enabled AND deleted_at IS NULL;

-- name: stop_failing --
-- In: webhook_id. A success ends the failing period.
UPDATE webhook_subscriptions SET failing_since = NULL
 WHERE id = %(webhook_id)s AND failing_since IS NOT NULL;

-- name: auto_disable --
-- In: webhook_id, now (epoch), period (seconds), reason, actor, targets (the
-- operational subscriptions' ids), delivery_ids (their deliveries' ids, in
-- the same order), event_id, payload (json), subject, body.
-- Out: the subscription's row if THIS statement disabled it, else NO row.
-- One statement: the disable happens only if the subscription is still enabled
-- and has failed without a success for the whole period (a success committed
-- meanwhile cleared failing_since: nothing happens). With the disable, in
-- the same commit: the audit row, the endpoint.disabled deliveries (retrying,
-- due now: the caller queues them) and the e-mail to the tenant's contact, if
-- it has one. A second run finds it disabled and writes nothing.
WITH sub AS (
    SELECT id, tenant_id, failing_since FROM webhook_subscriptions
     WHERE id = %(webhook_id)s AND enabled AND deleted_at IS NULL
       AND failing_since <= to_timestamp(%(now)s::float8) - make_interval(secs => %(period)s::float8)
       FOR NO KEY UPDATE
), disabled AS (
    UPDATE webhook_subscriptions s
       SET enabled = false, disabled_reason = %(reason)s, updated_at = now()
      FROM sub WHERE s.id = sub.id
    RETURNING s.id, s.tenant_id, sub.failing_since
), audited AS (
    INSERT INTO webhook_subscription_audit (webhook_id, action, actor, detail)
    SELECT id, 'disable', %(actor)s, jsonb_build_object('reason', %(reason)s::text, 'automatic', true,
                                                       'failing_since', failing_since)
      FROM disabled
), notices AS (
    INSERT INTO webhook_deliveries (id, webhook_id, tenant_id, event_id, event_type, payload, occurred_at,
                                    event_sequence, status, next_attempt_at)
    SELECT t.delivery_id, t.webhook_id, d.tenant_id, %(event_id)s, 'endpoint.disabled', %(payload)s::jsonb, now(),
           nextval('webhook_event_sequence'), 'retrying', now()
      FROM disabled d
     CROSS JOIN unnest(%(targets)s::text[], %(delivery_ids)s::text[]) AS t(webhook_id, delivery_id)
    ON CONFLICT DO NOTHING  -- every unique index: the id is derived from (webhook_id, event_id)
), mailed AS (
    INSERT INTO notifications (notification_key, tenant_id, kind, recipient, subject, body_text)
    SELECT %(event_id)s, d.tenant_id, 'endpoint.disabled', b.contact_email, %(subject)s, %(body)s
      FROM disabled d JOIN billing_tenants b ON b.tenant_id = d.tenant_id
     WHERE b.contact_email IS NOT NULL
    ON CONFLICT (notification_key) DO NOTHING
)
SELECT id, tenant_id, extract(epoch FROM failing_since)::float8 AS failing_since FROM disabled;

-- name: announce_exhausted --
-- In: delivery_id, generation, targets, delivery_ids (as auto_disable),
-- event_id, payload, subject, body. Out: a row if the delivery is dead in that
-- generation, so the notices were written (once: a second run conflicts on
-- the event id and the notification key and writes nothing).
WITH dead AS (
    SELECT id, tenant_id FROM webhook_deliveries
     WHERE id = %(delivery_id)s AND generation = %(generation)s AND status = 'dead'
), notices AS (
    INSERT INTO webhook_deliveries (id, webhook_id, tenant_id, event_id, event_type, payload, occurred_at,
                                    event_sequence, status, next_attempt_at)
    SELECT t.delivery_id, t.webhook_id, d.tenant_id, %(event_id)s, 'message.attempt.exhausted', %(payload)s::jsonb,
           now(), nextval('webhook_event_sequence'), 'retrying', now()
      FROM dead d
     CROSS JOIN unnest(%(targets)s::text[], %(delivery_ids)s::text[]) AS t(webhook_id, delivery_id)
    ON CONFLICT DO NOTHING  -- every unique index: the id is derived from (webhook_id, event_id)
), mailed AS (
    INSERT INTO notifications (notification_key, tenant_id, kind, recipient, subject, body_text)
    SELECT %(event_id)s, d.tenant_id, 'message.attempt.exhausted', b.contact_email, %(subject)s, %(body)s
      FROM dead d JOIN billing_tenants b ON b.tenant_id = d.tenant_id
     WHERE b.contact_email IS NOT NULL
    ON CONFLICT (notification_key) DO NOTHING
)
SELECT id FROM dead;

-- name: set_contact --
-- In: tenant_id, email (NULL: none). Out: a row if billing knows the tenant.
UPDATE billing_tenants SET contact_email = %(email)s WHERE tenant_id = %(tenant_id)s
RETURNING tenant_id;
