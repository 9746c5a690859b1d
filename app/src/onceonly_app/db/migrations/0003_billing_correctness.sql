-- Billing correctness (payments, dates and schedules). See
-- docs/scheduled-jobs.md for the policies these tables carry.

-- True for an IANA time zone name PostgreSQL knows ('Europe/Berlin', 'UTC').
-- Abbreviations and POSIX offsets ('+05', 'EST5EDT' aside) are refused: their
-- sign conventions surprise people and they ignore daylight saving.
CREATE OR REPLACE FUNCTION billing_is_time_zone(name text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM pg_timezone_names z WHERE z.name = $1)
$$;

-- Per-tenant billing settings. A tenant without a row uses the defaults.
--   time_zone: a due day ends at midnight here (overdue job).
CREATE TABLE IF NOT EXISTS billing_tenants (
    tenant_id   text PRIMARY KEY,
    time_zone   text NOT NULL DEFAULT 'UTC' CHECK (billing_is_time_zone(time_zone)),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- The accounts payments are received on, and the tenant each belongs to. The
-- watcher credits a payment only if it is TO one of these accounts, and matches
-- its memo only against that tenant's invoices.
CREATE TABLE IF NOT EXISTS payment_accounts (
    account_id  text PRIMARY KEY CHECK (account_id ~ '^G[A-Z2-7]{55}$'),
    tenant_id   text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS payment_accounts_tenant ON payment_accounts (tenant_id);

-- Payments: one row per payment OPERATION (a transaction can carry several),
-- recorded whether or not it was credited.
--   payment_id: the operation id (Horizon's record id), now the key.
--   outcome: settled   credited; the invoice's credited total now equals its amount
--            partial   credited; the invoice is still short
--            overpaid  credited; the invoice's credited total now exceeds its amount
--            unmatched not credited (reason: asset_not_accepted, no_memo,
--                      unknown_invoice, wrong_currency, invoice_paid, invoice_void, …)
--   amount_cents: the amount in minor units of the asset's currency (NULL when
--            the asset is not accepted for any currency); credited rows count it.
--   late: credited to an invoice that was already overdue.
--   paid_at: the ledger close time of the payment's transaction.
ALTER TABLE payments DROP CONSTRAINT IF EXISTS payments_pkey;
ALTER TABLE payments ADD CONSTRAINT payments_pkey PRIMARY KEY (payment_id);
ALTER TABLE payments ALTER COLUMN amount_cents DROP NOT NULL;
ALTER TABLE payments
    ADD COLUMN IF NOT EXISTS operation_type text NOT NULL DEFAULT 'payment',
    ADD COLUMN IF NOT EXISTS to_account     text,
    ADD COLUMN IF NOT EXISTS tenant_id      text,
    ADD COLUMN IF NOT EXISTS asset_issuer   text,
    ADD COLUMN IF NOT EXISTS amount         numeric(38, 7),
    ADD COLUMN IF NOT EXISTS outcome        text NOT NULL DEFAULT 'partial'
        CHECK (outcome IN ('settled', 'partial', 'overpaid', 'unmatched')),
    ADD COLUMN IF NOT EXISTS reason         text,
    ADD COLUMN IF NOT EXISTS late           boolean NOT NULL DEFAULT false;
-- Rows applied before this migration: those without an invoice were never credited.
UPDATE payments SET outcome = 'unmatched', reason = 'unknown_invoice' WHERE invoice_id IS NULL;
CREATE INDEX IF NOT EXISTS payments_transaction ON payments (transaction_hash);
CREATE INDEX IF NOT EXISTS payments_needing_attention
    ON payments (tenant_id, applied_at) WHERE outcome IN ('unmatched', 'overpaid');

-- Notifications can be cancelled: an overdue e-mail whose invoice is no longer
-- overdue when its turn comes (paid or voided meanwhile) is not sent.
ALTER TABLE notifications DROP CONSTRAINT IF EXISTS notifications_status_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_status_check
    CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'cancelled'));

-- Period k of a schedule starts at anchor + k * cadence (from the anchor, so
-- monthly periods do not drift: Jan 31, Feb 28, Mar 31). One definition, used
-- by the generated column below and by recurring.sql.
CREATE OR REPLACE FUNCTION billing_period_start(anchor date, cadence text, k integer) RETURNS date
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (anchor + k * CASE cadence WHEN 'daily' THEN interval '1 day'
                                      WHEN 'weekly' THEN interval '7 days'
                                      ELSE interval '1 month' END)::date
$$;

-- The start of the first period not yet generated, kept by PostgreSQL itself,
-- so that finding the due schedules is one index range scan: a run costs what
-- is due, not (schedules x periods).
ALTER TABLE billing_schedules
    ADD COLUMN IF NOT EXISTS next_period_start date
    GENERATED ALWAYS AS (billing_period_start(anchor, cadence, next_period)) STORED;
CREATE INDEX IF NOT EXISTS billing_schedules_due ON billing_schedules (next_period_start) WHERE active;

-- Pauses of a schedule: [paused_on, resumed_on). A period that starts inside a
-- pause is never billed, not even on resume (it is skipped, and the schedule
-- moves past it). resumed_on NULL: still paused.
CREATE TABLE IF NOT EXISTS billing_schedule_pauses (
    id           bigserial PRIMARY KEY,
    schedule_id  text NOT NULL REFERENCES billing_schedules (id),
    paused_on    date NOT NULL,
    resumed_on   date CHECK (resumed_on IS NULL OR resumed_on >= paused_on),
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX IF NOT EXISTS billing_schedule_pauses_open
    ON billing_schedule_pauses (schedule_id) WHERE resumed_on IS NULL;
CREATE INDEX IF NOT EXISTS billing_schedule_pauses_schedule ON billing_schedule_pauses (schedule_id, paused_on);

-- Pausing is switching `active` off, resuming is switching it on (by any
-- client, SQL included): the trigger writes the pause window, dated by the
-- database's clock in UTC, in the same transaction.
CREATE OR REPLACE FUNCTION billing_record_schedule_pause() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    today date := (now() AT TIME ZONE 'UTC')::date;
BEGIN
    IF OLD.active AND NOT NEW.active THEN
        INSERT INTO billing_schedule_pauses (schedule_id, paused_on) VALUES (NEW.id, today)
        ON CONFLICT (schedule_id) WHERE resumed_on IS NULL DO NOTHING;
    ELSIF NEW.active AND NOT OLD.active THEN
        UPDATE billing_schedule_pauses SET resumed_on = greatest(today, paused_on)
         WHERE schedule_id = NEW.id AND resumed_on IS NULL;
    END IF;
    RETURN NEW;
END $$;

DROP TRIGGER IF EXISTS billing_schedules_pause_history ON billing_schedules;
CREATE TRIGGER billing_schedules_pause_history
    AFTER UPDATE OF active ON billing_schedules
    FOR EACH ROW WHEN (OLD.active IS DISTINCT FROM NEW.active)
    EXECUTE FUNCTION billing_record_schedule_pause();
