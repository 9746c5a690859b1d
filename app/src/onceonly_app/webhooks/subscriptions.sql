-- Managing webhook subscriptions (subscriptions.py): enable, disable, delete.
-- Each function runs its statements in one transaction of the caller's
-- connection; the subscription row's lock orders them against the attempts
-- that hold a delivery (deliveries.sql, record_held).

-- name: lock_subscription --
-- In: webhook_id. Out: the row's state, locked until the transaction ends, or NO row.
-- NO KEY UPDATE: it waits for (and holds off) record_held's lock, but not the
-- key-share lock a new delivery's foreign key takes, so dispatching goes on.
SELECT id, enabled, deleted_at IS NOT NULL AS deleted FROM webhook_subscriptions
 WHERE id = %(webhook_id)s
   FOR NO KEY UPDATE;

-- name: set_enabled --
-- In: webhook_id, enabled, reason (disabled_reason; NULL when enabling).
UPDATE webhook_subscriptions
   SET enabled = %(enabled)s, disabled_reason = %(reason)s, updated_at = now()
 WHERE id = %(webhook_id)s AND deleted_at IS NULL;

-- name: expire_held --
-- In: webhook_id, retention (seconds). Out: the held deliveries whose event is
-- older than the retention, now expired: they are not sent.
-- Rows locked in id order, like every statement that locks several deliveries: none deadlock.
WITH locked AS (
    SELECT id FROM webhook_deliveries
     WHERE webhook_id = %(webhook_id)s AND status = 'held'
       AND coalesce(occurred_at, created_at) < now() - make_interval(secs => %(retention)s::float8)
     ORDER BY id FOR NO KEY UPDATE
)
UPDATE webhook_deliveries d
   SET status = 'expired', next_attempt_at = NULL, updated_at = now(),
       last_error = format('held longer than the retention of %%s s: not sent', %(retention)s::float8)
  FROM locked
 WHERE d.id = locked.id AND d.status = 'held'
RETURNING d.id;

-- name: release_held --
-- In: webhook_id. Out: the held deliveries, released: 'retrying' and due now,
-- with a new generation, token 0 and the whole retry schedule again (as a
-- redrive does: claims from before are fenced off by the generation). Runs
-- after lock_subscription in the same transaction, so it sees every hold that
-- committed before the lock, and a hold waiting for the lock sees the enable.
-- Rows locked in id order, like every statement that locks several deliveries: none deadlock.
WITH locked AS (
    SELECT id FROM webhook_deliveries WHERE webhook_id = %(webhook_id)s AND status = 'held'
     ORDER BY id FOR NO KEY UPDATE
)
UPDATE webhook_deliveries d
   SET status = 'retrying', generation = d.generation + 1, fence_token = 0, attempts = 0,
       next_attempt_at = now(), updated_at = now()
  FROM locked
 WHERE d.id = locked.id AND d.status = 'held'
RETURNING d.id;

-- name: due_retrying --
-- In: webhook_id. Out: its deliveries waiting for a retry that is due and that
-- no claim has stamped since their release (fence_token 0), in event order,
-- with the generation their queue item must carry: the ones just released,
-- and any a previous enable released but died before queueing. The caller
-- queues them with put_if_absent: the ones with a queue item keep it.
-- Event order is the events' sequence (taken under the changed invoice's row
-- lock, so in the order the changes committed), not occurred_at (a
-- transaction's START time: a payment's transaction that began before the
-- overdue run commits after it). Events without a sequence (from before
-- sequences) come first, by time.
SELECT id, generation FROM webhook_deliveries
 WHERE webhook_id = %(webhook_id)s AND status = 'retrying' AND next_attempt_at <= now() AND fence_token = 0
 ORDER BY event_sequence NULLS FIRST, coalesce(occurred_at, created_at), id;

-- name: drop_deliveries --
-- In: webhook_id. Out: the deliveries of a deleted subscription that had not
-- finished: queued, held or in flight, now 'dropped' (a late outcome of a
-- request in flight is refused by the fence and logged with recorded = false;
-- a queue item left for one is acked by the worker that claims it).
-- Rows locked in id order, like every statement that locks several deliveries: none deadlock.
WITH locked AS (
    SELECT id FROM webhook_deliveries
     WHERE webhook_id = %(webhook_id)s AND status IN ('pending', 'attempting', 'retrying', 'held')
     ORDER BY id FOR NO KEY UPDATE
)
UPDATE webhook_deliveries d
   SET status = 'dropped', next_attempt_at = NULL, last_error = 'subscription deleted', updated_at = now()
  FROM locked
 WHERE d.id = locked.id AND d.status IN ('pending', 'attempting', 'retrying', 'held')
RETURNING d.id;

-- name: mark_deleted --
-- In: webhook_id. A deleted subscription is disabled too, and keeps its row
-- (its deliveries and attempts reference it: the history stays).
UPDATE webhook_subscriptions
   SET deleted_at = now(), enabled = false, disabled_reason = 'deleted', updated_at = now()
 WHERE id = %(webhook_id)s AND deleted_at IS NULL;

-- name: tenant_known --
-- In: tenant_id. Out: known (bool): billing knows the tenant (its settings,
-- invoices, schedules or receiving accounts), so its events can exist.
SELECT EXISTS (SELECT 1 FROM billing_tenants WHERE tenant_id = %(tenant_id)s)
    OR EXISTS (SELECT 1 FROM invoices WHERE tenant_id = %(tenant_id)s)
    OR EXISTS (SELECT 1 FROM billing_schedules WHERE tenant_id = %(tenant_id)s)
    OR EXISTS (SELECT 1 FROM payment_accounts WHERE tenant_id = %(tenant_id)s) AS known;

-- name: register_tenant --
-- In: tenant_id. Billing's settings row with the defaults (time zone UTC), if
-- it has none: `subscriptions add --new-tenant` on a fresh deployment.
INSERT INTO billing_tenants (tenant_id) VALUES (%(tenant_id)s) ON CONFLICT (tenant_id) DO NOTHING;

-- name: insert_subscription --
-- In: webhook_id, tenant_id, url, secret, event_types (text[] or NULL: every
-- type), max_in_flight, rate_per_second. Out: the new row's id, or NO row when
-- the id is taken.
INSERT INTO webhook_subscriptions (id, tenant_id, url, secret, event_types, max_in_flight, rate_per_second)
VALUES (%(webhook_id)s, %(tenant_id)s, %(url)s, %(secret)s, %(event_types)s::text[], %(max_in_flight)s,
        %(rate_per_second)s)
ON CONFLICT (id) DO NOTHING
RETURNING id;

-- name: update_subscription --
-- In: webhook_id, url, event_types, set_event_types (false: keep the filter),
-- max_in_flight, rate_per_second (NULL: keep).
-- Runs after lock_subscription; a URL change is what record_held compares a
-- late 410's URL against.
UPDATE webhook_subscriptions
   SET url = coalesce(%(url)s, url),
       event_types = CASE WHEN %(set_event_types)s THEN %(event_types)s::text[] ELSE event_types END,
       max_in_flight = coalesce(%(max_in_flight)s::integer, max_in_flight),
       rate_per_second = coalesce(%(rate_per_second)s::float8, rate_per_second),
       updated_at = now()
 WHERE id = %(webhook_id)s AND deleted_at IS NULL;

-- name: record_change --
-- In: webhook_id, action, actor, detail (json, never a secret). In the
-- transaction of the change it records.
INSERT INTO webhook_subscription_audit (webhook_id, action, actor, detail)
VALUES (%(webhook_id)s, %(action)s, %(actor)s, %(detail)s::jsonb);

-- name: list_subscriptions --
-- In: tenant_id (or NULL: all), include_deleted. Never the secrets.
SELECT id, tenant_id, url, enabled, disabled_reason, event_types, max_in_flight, rate_per_second,
       created_at, updated_at, deleted_at, description
  FROM webhook_subscriptions
 WHERE (%(tenant_id)s::text IS NULL OR tenant_id = %(tenant_id)s::text)
   AND (%(include_deleted)s OR deleted_at IS NULL)
 ORDER BY tenant_id, created_at, id;

-- name: show_subscription --
-- In: webhook_id. Out: the row (never the secrets, nor header values: an auth
-- token is one), how many previous secrets
-- still sign beside the current one, and its deliveries by status.
SELECT s.id, s.tenant_id, s.url, s.enabled, s.disabled_reason, s.event_types, s.max_in_flight,
       s.rate_per_second, s.created_at, s.updated_at, s.deleted_at,
       s.description, s.metadata, s.failing_since,
       ARRAY(SELECT jsonb_object_keys(s.headers) ORDER BY 1) AS header_names,
       (SELECT count(*) FROM jsonb_array_elements(s.previous_secrets) p
         WHERE (p ->> 'until')::float8 > extract(epoch FROM now())) AS previous_secrets_signing,
       (SELECT coalesce(jsonb_object_agg(status, n), '{}')
          FROM (SELECT status, count(*) AS n FROM webhook_deliveries d
                 WHERE d.webhook_id = s.id GROUP BY status) counts) AS deliveries
  FROM webhook_subscriptions s
 WHERE s.id = %(webhook_id)s;

-- name: audit_log --
-- In: webhook_id, limit. Out: its latest recorded changes, newest first.
SELECT action, actor, at, detail FROM webhook_subscription_audit
 WHERE webhook_id = %(webhook_id)s
 ORDER BY id DESC
 LIMIT %(limit)s;

-- name: current_secret --
-- In: webhook_id. Out: the secret it signs with now (read under the lock
-- current_secret took, in the transaction that audits the read).
SELECT secret FROM webhook_subscriptions WHERE id = %(webhook_id)s;
