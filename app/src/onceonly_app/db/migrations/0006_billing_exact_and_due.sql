-- Billing, exactly and only when due. See docs/scheduled-jobs.md.

-- Received amounts are kept exactly: payments.amount_cents is the amount in
-- minor units of its currency with the ledger's 7 decimals (50.005 USDC is
-- 5000.5 cents), so partial payments sum to exactly what was paid and are
-- compared with the invoice's whole minor units exactly. Rows recorded before
-- keep the whole minor units they were credited with.
ALTER TABLE payments ALTER COLUMN amount_cents TYPE numeric(38, 7);

-- What credited payments cover of an invoice, exactly (minor units, 7 decimals).
-- One definition for the watcher (its verdict, the move to paid) and the
-- overdue job (what its e-mail says is still due).
CREATE OR REPLACE FUNCTION billing_credited(invoice_id text) RETURNS numeric
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(sum(p.amount_cents), 0) FROM payments p
     WHERE p.invoice_id = $1 AND p.outcome <> 'unmatched'
$$;

-- The instant an invoice's due day ends: the next midnight after due_at's date
-- in the tenant's time zone. A payment with a ledger time before it is on time;
-- the overdue job moves nothing before it.
CREATE OR REPLACE FUNCTION billing_due_day_end(due_at timestamptz, time_zone text) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (((due_at AT TIME ZONE time_zone)::date + 1)::timestamp AT TIME ZONE time_zone)
$$;

-- How far the payment watcher has read the ledger: every payment with a ledger
-- time before ledger_read_to has been applied. It moves only up, in the
-- transaction that advances the cursor. The overdue job moves an invoice only
-- once its due day's end is at or before it (NULL: the watcher never read the
-- ledger, so nothing is overdue yet).
ALTER TABLE payment_cursors ADD COLUMN IF NOT EXISTS ledger_read_to timestamptz;

-- A zero invoice (a free plan, a 100 % discount) is settled when it is issued:
-- it is inserted (or reduced to zero) as `paid`, paid_at the issue time, and so
-- it is never overdue or dunned. Zero invoices still open or overdue now are
-- settled the same way, with their history rows.
CREATE OR REPLACE FUNCTION billing_settle_zero_invoice() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.amount_cents = 0 AND NEW.status IN ('open', 'overdue') THEN
        NEW.status := 'paid';
        NEW.paid_at := coalesce(NEW.paid_at, now());
    END IF;
    RETURN NEW;
END $$;

DROP TRIGGER IF EXISTS invoices_settle_zero ON invoices;
CREATE TRIGGER invoices_settle_zero
    BEFORE INSERT OR UPDATE OF amount_cents, status ON invoices
    FOR EACH ROW EXECUTE FUNCTION billing_settle_zero_invoice();

INSERT INTO invoice_status_history (invoice_id, from_status, to_status, job)
SELECT id, status, 'paid', 'migration:0006' FROM invoices WHERE amount_cents = 0 AND status IN ('open', 'overdue')
ON CONFLICT (invoice_id, from_status, to_status) DO NOTHING;
UPDATE invoices SET status = 'paid', paid_at = coalesce(paid_at, now()), updated_at = now()
 WHERE amount_cents = 0 AND status IN ('open', 'overdue');

-- Currency codes are ISO 4217's shape: three upper-case letters. Whatever
-- writes an invoice or a schedule (the jobs, a tenant's SQL) may send ' usd';
-- it is stored as 'USD', so it matches the accepted assets' currency exactly.
-- Anything else ('US', 'U$D', 'dollars') is refused by the CHECK, naming the
-- column. Rows already stored are normalised; one that is still not a code
-- is left to a person (NOT VALID: the deploy does not fail on it), while
-- every row written from now on is checked.
CREATE OR REPLACE FUNCTION billing_normalise_currency() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.currency := upper(btrim(NEW.currency));
    RETURN NEW;
END $$;

DROP TRIGGER IF EXISTS invoices_currency_normalised ON invoices;
CREATE TRIGGER invoices_currency_normalised
    BEFORE INSERT OR UPDATE OF currency ON invoices
    FOR EACH ROW EXECUTE FUNCTION billing_normalise_currency();
DROP TRIGGER IF EXISTS billing_schedules_currency_normalised ON billing_schedules;
CREATE TRIGGER billing_schedules_currency_normalised
    BEFORE INSERT OR UPDATE OF currency ON billing_schedules
    FOR EACH ROW EXECUTE FUNCTION billing_normalise_currency();

UPDATE invoices SET currency = currency WHERE currency IS DISTINCT FROM upper(btrim(currency));
UPDATE billing_schedules SET currency = currency WHERE currency IS DISTINCT FROM upper(btrim(currency));
ALTER TABLE invoices DROP CONSTRAINT IF EXISTS invoices_currency_code;
ALTER TABLE invoices ADD CONSTRAINT invoices_currency_code CHECK (currency ~ '^[A-Z]{3}$') NOT VALID;
ALTER TABLE billing_schedules DROP CONSTRAINT IF EXISTS billing_schedules_currency_code;
ALTER TABLE billing_schedules ADD CONSTRAINT billing_schedules_currency_code
    CHECK (currency ~ '^[A-Z]{3}$') NOT VALID;

-- One calendar per tenant: billing periods start, and pauses are dated, by the
-- tenant's own date (billing_tenants.time_zone, UTC without a row), like due
-- days. A period dated 1 June starts at midnight of 1 June where the tenant is.
CREATE OR REPLACE FUNCTION billing_local_day(at timestamptz, tenant text) RETURNS date
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (at AT TIME ZONE coalesce((SELECT t.time_zone FROM billing_tenants t WHERE t.tenant_id = $2), 'UTC'))::date
$$;

CREATE OR REPLACE FUNCTION billing_record_schedule_pause() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    today date := billing_local_day(now(), NEW.tenant_id);
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
