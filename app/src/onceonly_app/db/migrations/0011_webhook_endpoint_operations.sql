-- Endpoint operations (docs/webhooks.md, "Managing subscriptions"): abort from
-- the receiver, per-subscription headers, description and metadata, failing
-- endpoints disabled automatically with notice, recover and replay.

-- A receiver that answers `webhook-delivery: abort-message` ends the delivery:
--   aborted  no more attempts; recover or replay can send it again.
ALTER TABLE webhook_deliveries DROP CONSTRAINT IF EXISTS webhook_deliveries_status_check;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_status_check
    CHECK (status IN ('pending', 'attempting', 'retrying', 'succeeded', 'dead', 'held', 'expired', 'dropped',
                      'aborted'));
ALTER TABLE webhook_attempts DROP CONSTRAINT IF EXISTS webhook_attempts_outcome_check;
ALTER TABLE webhook_attempts ADD CONSTRAINT webhook_attempts_outcome_check
    CHECK (outcome IN ('succeeded', 'failed', 'gone', 'refused', 'disabled', 'dropped', 'aborted'));

-- Settings of a subscription (webhooks/endpoint_settings.py validates them; the
-- CHECKs say the same bounds). headers: {"Name": "value"}, sent with every
-- attempt, never in place of the signature headers or Host (sender.py).
ALTER TABLE webhook_subscriptions ADD COLUMN IF NOT EXISTS description text NOT NULL DEFAULT ''
    CONSTRAINT webhook_subscriptions_description_length CHECK (length(description) <= 500);
ALTER TABLE webhook_subscriptions ADD COLUMN IF NOT EXISTS metadata jsonb NOT NULL DEFAULT '{}'
    CONSTRAINT webhook_subscriptions_metadata_object CHECK (jsonb_typeof(metadata) = 'object');
ALTER TABLE webhook_subscriptions ADD COLUMN IF NOT EXISTS headers jsonb NOT NULL DEFAULT '{}'
    CONSTRAINT webhook_subscriptions_headers_object CHECK (jsonb_typeof(headers) = 'object');

-- When the subscription's attempts started failing without a success since
-- (NULL: the last recorded attempt succeeded, or none failed yet). Every
-- failure of an enabled subscription sets it if unset, every success clears it;
-- once a failure comes the configured period after it, the subscription is
-- disabled automatically (webhooks/endpoint_health.py).
ALTER TABLE webhook_subscriptions ADD COLUMN IF NOT EXISTS failing_since timestamptz;

-- Where a tenant's operational e-mails go (an auto-disable, an exhausted
-- message), through the notifications outbox and SES. NULL: none is sent
-- (the operational webhook events still are).
ALTER TABLE billing_tenants ADD COLUMN IF NOT EXISTS contact_email text;

-- Recover and replay select a subscription's deliveries by their event's time.
CREATE INDEX IF NOT EXISTS webhook_deliveries_by_event_time
    ON webhook_deliveries (webhook_id, (coalesce(occurred_at, created_at)));
