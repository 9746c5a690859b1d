-- Managing webhook subscriptions without SQL (docs/webhooks.md,
-- "Managing subscriptions"): event-type filters and an audit of every change.

-- The event types a subscription wants; NULL: every type. The fan-out
-- (events/outbox.sql) writes nothing for a type not listed, so a
-- filter change applies to the events fanned out after it commits.
ALTER TABLE webhook_subscriptions ADD COLUMN IF NOT EXISTS event_types text[];
ALTER TABLE webhook_subscriptions ADD CONSTRAINT webhook_subscriptions_event_types_not_empty
    CHECK (event_types IS NULL OR cardinality(event_types) > 0);

-- Every change made through onceonly_app.webhooks.subscriptions (and a 410's
-- disable): who, when, what. detail never holds a secret.
CREATE TABLE IF NOT EXISTS webhook_subscription_audit (
    id          bigserial PRIMARY KEY,
    webhook_id  text NOT NULL REFERENCES webhook_subscriptions (id),
    action      text NOT NULL,   -- add | update | disable | enable | delete | rotate-secret
    actor       text NOT NULL,   -- the operator (--actor, else the OS user), or "endpoint" for a 410
    at          timestamptz NOT NULL DEFAULT now(),
    detail      jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS webhook_subscription_audit_by_webhook ON webhook_subscription_audit (webhook_id, id);

-- Per-endpoint limits (webhooks/endpoint_limits.py): requests in flight at once
-- (lease slots in the coordination store) and requests per second (the bucket
-- below). A request held back by either is delayed, not failed.
ALTER TABLE webhook_subscriptions ADD COLUMN IF NOT EXISTS max_in_flight integer NOT NULL DEFAULT 10
    CONSTRAINT webhook_subscriptions_max_in_flight CHECK (max_in_flight BETWEEN 1 AND 1000);
ALTER TABLE webhook_subscriptions ADD COLUMN IF NOT EXISTS rate_per_second double precision NOT NULL DEFAULT 50
    CONSTRAINT webhook_subscriptions_rate CHECK (rate_per_second > 0 AND rate_per_second <= 10000);
CREATE TABLE IF NOT EXISTS webhook_endpoint_buckets (
    webhook_id   text PRIMARY KEY REFERENCES webhook_subscriptions (id),
    tokens       double precision NOT NULL,
    refilled_at  timestamptz NOT NULL
);
