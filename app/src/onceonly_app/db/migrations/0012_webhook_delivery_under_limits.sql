-- Delivery under per-endpoint limits (docs/webhooks.md, "Per-endpoint limits"):
-- where a held-back delivery's next try goes, and how long it may wait.

-- The last turn handed to a delivery held back by the rate (endpoint_limits.sql,
-- reserve_rate_turn): the next one held back is due one token later, so the
-- deliveries already waiting are counted and none comes back before its token.
ALTER TABLE webhook_endpoint_buckets ADD COLUMN IF NOT EXISTS reserved_until timestamptz;

-- How many times the delivery was held back (no attempt used): the delay for a
-- full in-flight cap grows with it.
ALTER TABLE webhook_deliveries ADD COLUMN IF NOT EXISTS deferrals integer NOT NULL DEFAULT 0;

-- The rate's floor: one request a minute (endpoint_limits.MIN_RATE). A lower
-- rate held deliveries back for ever; such a subscription is raised to the
-- floor, and the change is in its audit.
WITH raised AS (
    UPDATE webhook_subscriptions s
       SET rate_per_second = 1.0 / 60, updated_at = now()
      FROM (SELECT id, rate_per_second AS old_rate FROM webhook_subscriptions
             WHERE rate_per_second < 1.0 / 60 FOR UPDATE) old
     WHERE s.id = old.id
    RETURNING s.id, old.old_rate
)
INSERT INTO webhook_subscription_audit (webhook_id, action, actor, detail)
SELECT id, 'update', 'migration 0012',
       jsonb_build_object('rate_per_second', jsonb_build_object('from', old_rate, 'to', 1.0 / 60))
  FROM raised;
ALTER TABLE webhook_subscriptions ADD CONSTRAINT webhook_subscriptions_rate_floor
    CHECK (rate_per_second >= 1.0 / 60);
