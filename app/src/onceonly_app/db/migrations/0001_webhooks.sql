-- Webhook delivery: subscriptions, one delivery per (webhook, event),
-- and an append-only log of every attempt. See docs/webhooks.md.

CREATE TABLE IF NOT EXISTS webhook_subscriptions (
    id               text PRIMARY KEY,
    url              text NOT NULL,
    secret           text NOT NULL,              -- whsec_… (Standard Webhooks)
    enabled          boolean NOT NULL DEFAULT true,
    disabled_reason  text,                       -- e.g. "410 Gone" when the endpoint asked us to stop
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

-- One row per (webhook_id, event_id): the unique key is what makes a duplicate
-- SQS message or a repeated event create nothing.
--   status: pending    created; the dispatcher's first attempt is outstanding
--           attempting a retry worker stamped its fencing token and is attempting
--           retrying   the last attempt failed; the due queue holds the next one
--           succeeded  a 2xx was recorded
--           dead       out of attempts, 410 Gone, refused URL or disabled subscription
--   generation/fence_token: every write recording an outcome must match both;
--           a retry claim stamps its queue token first (fence_token < token),
--           redrive bumps the generation and restarts the token at 0.
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    id               text PRIMARY KEY,           -- msg_…: the webhook-id header on every attempt
    webhook_id       text NOT NULL REFERENCES webhook_subscriptions (id),
    event_id         text NOT NULL,
    event_type       text NOT NULL,
    payload          jsonb NOT NULL,
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'attempting', 'retrying', 'succeeded', 'dead')),
    attempts         integer NOT NULL DEFAULT 0, -- outcomes recorded (fenced)
    next_attempt_at  timestamptz,
    last_error       text,
    response_code    integer,
    delivered_at     timestamptz,
    generation       integer NOT NULL DEFAULT 0,
    fence_token      bigint NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT webhook_deliveries_once UNIQUE (webhook_id, event_id)
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_dead
    ON webhook_deliveries (webhook_id, updated_at) WHERE status = 'dead';

-- Every POST that was made, including the ones whose outcome was refused by the
-- fence (recorded = false): the audit trail shows a late, stale attempt too.
CREATE TABLE IF NOT EXISTS webhook_attempts (
    id             bigserial PRIMARY KEY,
    delivery_id    text NOT NULL REFERENCES webhook_deliveries (id),
    generation     integer NOT NULL,
    fence_token    bigint NOT NULL,
    attempt        integer,                      -- the delivery's attempt number; NULL when refused
    outcome        text NOT NULL CHECK (outcome IN ('succeeded', 'failed', 'gone', 'refused', 'disabled')),
    response_code  integer,
    error          text,
    recorded       boolean NOT NULL,             -- false: a newer holder owned the delivery
    started_at     timestamptz NOT NULL,
    finished_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS webhook_attempts_delivery ON webhook_attempts (delivery_id, id);
