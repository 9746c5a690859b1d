-- Webhook events are kept while a subscription is disabled, and a subscription
-- can be deleted (docs/webhooks.md, "Disabled and deleted subscriptions").
--
-- New delivery statuses:
--   held     the subscription is disabled (by a 410 or an operator): kept, never
--            attempted, released in event order when the subscription is enabled
--   expired  held longer than the retention when the subscription was enabled: not sent
--   dropped  the subscription was deleted: ended, neither a failure nor dead-lettered
-- and the attempt outcome 'dropped' (an attempt that found its subscription deleted).

-- A deleted subscription keeps its row (deliveries and attempts reference it:
-- the history stays) and is never enabled again.
ALTER TABLE webhook_subscriptions ADD COLUMN IF NOT EXISTS deleted_at timestamptz;
ALTER TABLE webhook_subscriptions
    ADD CONSTRAINT webhook_subscriptions_deleted_is_disabled CHECK (deleted_at IS NULL OR NOT enabled);

ALTER TABLE webhook_deliveries DROP CONSTRAINT IF EXISTS webhook_deliveries_status_check;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_status_check
    CHECK (status IN ('pending', 'attempting', 'retrying', 'succeeded', 'dead', 'held', 'expired', 'dropped'));
ALTER TABLE webhook_attempts DROP CONSTRAINT IF EXISTS webhook_attempts_outcome_check;
ALTER TABLE webhook_attempts ADD CONSTRAINT webhook_attempts_outcome_check
    CHECK (outcome IN ('succeeded', 'failed', 'gone', 'refused', 'disabled', 'dropped'));

-- The fan-out now goes to every subscription of the tenant that is not deleted,
-- disabled ones included (their deliveries are held).
DROP INDEX IF EXISTS webhook_subscriptions_by_tenant;
CREATE INDEX IF NOT EXISTS webhook_subscriptions_live_by_tenant
    ON webhook_subscriptions (tenant_id) WHERE deleted_at IS NULL;
-- What enabling a subscription releases, in event order.
CREATE INDEX IF NOT EXISTS webhook_deliveries_held
    ON webhook_deliveries (webhook_id, created_at) WHERE status = 'held';

-- Before this migration an attempt on a disabled subscription dead-lettered the
-- delivery without a request. Those of subscriptions still disabled are held
-- now, so enabling the subscription delivers them like the events held from now on.
UPDATE webhook_deliveries d
   SET status = 'held', updated_at = now()
  FROM webhook_subscriptions s
 WHERE s.id = d.webhook_id AND NOT s.enabled
   AND d.status = 'dead' AND d.last_error IN ('subscription disabled', '410 Gone: subscription disabled');
