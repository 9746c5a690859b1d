-- Billing: invoices and what their transitions record, the e-mail
-- outbox, recurring schedules, payments, the payment poller's cursor and the
-- webhook outbox. See docs/scheduled-jobs.md.
--
-- The rules every table follows: each state transition is a conditional UPDATE
-- (… WHERE status = 'open'); each insert that could repeat has a unique key;
-- each write that must come from the current lease holder checks its fencing
-- token in the same transaction.

-- Recurring schedules. next_period is a high-water mark: the index of the first
-- period not yet generated. Period k starts at anchor + k * cadence.
CREATE TABLE IF NOT EXISTS billing_schedules (
    id              text PRIMARY KEY,
    tenant_id       text NOT NULL,
    customer_email  text NOT NULL,
    amount_cents    bigint NOT NULL CHECK (amount_cents >= 0),
    currency        text NOT NULL DEFAULT 'USD',
    cadence         text NOT NULL CHECK (cadence IN ('daily', 'weekly', 'monthly')),
    anchor          date NOT NULL,
    ends_on         date,
    due_days        integer NOT NULL DEFAULT 14 CHECK (due_days >= 0),
    active          boolean NOT NULL DEFAULT true,
    next_period     integer NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS billing_schedules_active ON billing_schedules (tenant_id) WHERE active;

--   status: draft → open → overdue → paid; open/overdue → void
CREATE TABLE IF NOT EXISTS invoices (
    id              text PRIMARY KEY,
    tenant_id       text NOT NULL,
    customer_email  text NOT NULL,
    amount_cents    bigint NOT NULL CHECK (amount_cents >= 0),
    currency        text NOT NULL DEFAULT 'USD',
    status          text NOT NULL DEFAULT 'open'
                    CHECK (status IN ('draft', 'open', 'overdue', 'paid', 'void')),
    due_at          timestamptz NOT NULL,
    schedule_id     text REFERENCES billing_schedules (id),
    period_key      text,                       -- the period's start date, for generated invoices
    paid_at         timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    -- a second generation of one schedule period is a no-op (NULLs: manual invoices)
    CONSTRAINT invoices_one_per_period UNIQUE (schedule_id, period_key)
);
CREATE INDEX IF NOT EXISTS invoices_open_by_due ON invoices (due_at) WHERE status = 'open';
CREATE INDEX IF NOT EXISTS invoices_tenant ON invoices (tenant_id, status);

-- One row per transition that happened, written in the transition's statement.
-- job/fence_token say which run made it (NULL for non-job transitions).
CREATE TABLE IF NOT EXISTS invoice_status_history (
    id           bigserial PRIMARY KEY,
    invoice_id   text NOT NULL REFERENCES invoices (id),
    from_status  text NOT NULL,
    to_status    text NOT NULL,
    job          text,
    fence_token  bigint,
    changed_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT invoice_status_history_once UNIQUE (invoice_id, from_status, to_status)
);

-- The activity feed. event_key (e.g. "invoice.overdue:INV") makes each event once.
CREATE TABLE IF NOT EXISTS activity_events (
    id           bigserial PRIMARY KEY,
    event_key    text NOT NULL UNIQUE,
    tenant_id    text NOT NULL,
    invoice_id   text REFERENCES invoices (id),
    kind         text NOT NULL,
    detail       jsonb NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS activity_events_tenant ON activity_events (tenant_id, created_at);

-- The e-mail outbox (sent by the notifications job through SES).
--   status: pending → sending (claimed) → sent | pending (retry, backoff) | failed (kept)
--   claimable_at: when a pending row is due, or when a claim's lease runs out,
--   so a crashed sender's row comes back by itself.
--   claim_token: bumped by every claim; marking the outcome requires it.
CREATE TABLE IF NOT EXISTS notifications (
    id                bigserial PRIMARY KEY,
    notification_key  text NOT NULL UNIQUE,      -- e.g. "invoice.overdue:INV"
    tenant_id         text NOT NULL,
    invoice_id        text REFERENCES invoices (id),
    kind              text NOT NULL,
    recipient         text NOT NULL,
    subject           text NOT NULL,
    body_text         text NOT NULL,
    status            text NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'sending', 'sent', 'failed')),
    attempts          integer NOT NULL DEFAULT 0,
    claim_token       bigint NOT NULL DEFAULT 0,
    claimable_at      timestamptz NOT NULL DEFAULT now(),
    provider_message_id text,
    last_error        text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    sent_at           timestamptz,
    updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS notifications_claimable
    ON notifications (claimable_at) WHERE status IN ('pending', 'sending');

-- Every send attempt, for the audit trail and the tests' counts.
CREATE TABLE IF NOT EXISTS notification_attempts (
    id               bigserial PRIMARY KEY,
    notification_id  bigint NOT NULL REFERENCES notifications (id),
    claim_token      bigint NOT NULL,
    outcome          text NOT NULL CHECK (outcome IN ('sent', 'failed')),
    error            text,
    at               timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT notification_attempts_once_per_claim UNIQUE (notification_id, claim_token)
);

-- One row per job tick that started: the fence of jobs whose writes must come
-- from the tick's current holder. A run stamps its token (only upward); each
-- transaction it commits locks the row and requires its own token, so a run
-- paused past its lease is refused once a newer run stamped.
CREATE TABLE IF NOT EXISTS job_ticks (
    job             text NOT NULL,
    scheduled_time  timestamptz NOT NULL,
    fence_token     bigint NOT NULL,
    started_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    result          jsonb,
    PRIMARY KEY (job, scheduled_time)
);

-- The payment poller's position, one row per poller (job name). fence_token is
-- the token of the poller lease that last stamped it: the cursor advances only
-- in a transaction that finds its own token here.
CREATE TABLE IF NOT EXISTS payment_cursors (
    poller       text PRIMARY KEY,
    cursor       text NOT NULL DEFAULT '',
    fence_token  bigint NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- Payments applied, once each: the transaction hash is the key.
CREATE TABLE IF NOT EXISTS payments (
    transaction_hash  text PRIMARY KEY,
    payment_id        text NOT NULL,
    paging_token      text NOT NULL,
    invoice_id        text REFERENCES invoices (id),  -- NULL: no invoice matched the memo
    amount_cents      bigint NOT NULL,
    asset_code        text NOT NULL,
    memo              text,
    poller            text NOT NULL,
    fence_token       bigint NOT NULL,
    paid_at           timestamptz,                    -- the payment's time at the source
    applied_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS payments_invoice ON payments (invoice_id);

-- Webhook events waiting for SQS, written in the payment's transaction so that a
-- crash between commit and send loses nothing: unsent rows are sent by the next
-- run. The dispatcher dedupes re-sends on (webhook_id, event_id).
CREATE TABLE IF NOT EXISTS webhook_outbox (
    event_id    text NOT NULL,
    webhook_id  text NOT NULL,
    event_type  text NOT NULL,
    tenant_id   text NOT NULL,
    payload     jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    sent_at     timestamptz,
    send_count  integer NOT NULL DEFAULT 0,
    PRIMARY KEY (webhook_id, event_id)
);
CREATE INDEX IF NOT EXISTS webhook_outbox_unsent ON webhook_outbox (created_at) WHERE sent_at IS NULL;
