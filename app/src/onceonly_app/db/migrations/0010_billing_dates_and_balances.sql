-- Billing that keeps its promises: due dates stored as dates, schedules created
-- inactive, amount changes against what was paid, memos that can name an
-- invoice. See docs/scheduled-jobs.md, "Policies".

-- Due dates are dates. An invoice stores the due day it was issued with
-- (due_on, a date in the tenant's calendar), the zone it was issued in
-- (due_time_zone) and the instant that day ends there (due_day_ends_at, local
-- midnight after due_on). A later change of the tenant's zone moves none of
-- them: the overdue job and the watcher read due_day_ends_at, never the
-- tenant's current zone. Rows stored before are dated by the zone they have now.
ALTER TABLE invoices
    ADD COLUMN IF NOT EXISTS due_on          date,
    ADD COLUMN IF NOT EXISTS due_time_zone   text,
    ADD COLUMN IF NOT EXISTS due_day_ends_at timestamptz;

UPDATE invoices i
   SET due_time_zone = z.zone,
       due_on = (i.due_at AT TIME ZONE z.zone)::date,
       due_day_ends_at = (((i.due_at AT TIME ZONE z.zone)::date + 1)::timestamp AT TIME ZONE z.zone)
  FROM (SELECT v.id, coalesce(t.time_zone, 'UTC') AS zone
          FROM invoices v LEFT JOIN billing_tenants t ON t.tenant_id = v.tenant_id) z
 WHERE z.id = i.id AND i.due_on IS NULL;

-- Whoever writes an invoice (the recurring job, a tenant's SQL) gives due_on or
-- due_at; the other, the zone and the day's end are filled in here. Re-dating
-- an invoice later (a new due_on or due_at) keeps the zone it was issued in.
CREATE OR REPLACE FUNCTION billing_fix_due_day() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.due_time_zone IS NULL THEN
        NEW.due_time_zone := coalesce((SELECT t.time_zone FROM billing_tenants t
                                        WHERE t.tenant_id = NEW.tenant_id), 'UTC');
    END IF;
    IF NEW.due_on IS NULL
       OR (TG_OP = 'UPDATE' AND NEW.due_at IS DISTINCT FROM OLD.due_at AND NEW.due_on IS NOT DISTINCT FROM OLD.due_on)
    THEN
        NEW.due_on := (NEW.due_at AT TIME ZONE NEW.due_time_zone)::date;
    ELSE
        NEW.due_at := NEW.due_on::timestamp AT TIME ZONE NEW.due_time_zone;
    END IF;
    NEW.due_day_ends_at := (NEW.due_on + 1)::timestamp AT TIME ZONE NEW.due_time_zone;
    RETURN NEW;
END $$;

DROP TRIGGER IF EXISTS invoices_due_day_fixed ON invoices;
CREATE TRIGGER invoices_due_day_fixed
    BEFORE INSERT OR UPDATE OF due_on, due_at ON invoices
    FOR EACH ROW EXECUTE FUNCTION billing_fix_due_day();

ALTER TABLE invoices ALTER COLUMN due_on SET NOT NULL;
ALTER TABLE invoices ALTER COLUMN due_time_zone SET NOT NULL;
ALTER TABLE invoices ALTER COLUMN due_day_ends_at SET NOT NULL;
CREATE INDEX IF NOT EXISTS invoices_open_by_due_day_end ON invoices (due_day_ends_at) WHERE status = 'open';

-- An invoice id a payment's memo cannot carry could never be paid: Stellar's
-- text memo holds 28 bytes. Refused when the invoice is created; rows stored
-- before are left for a person (NOT VALID).
ALTER TABLE invoices DROP CONSTRAINT IF EXISTS invoices_id_fits_a_memo;
ALTER TABLE invoices ADD CONSTRAINT invoices_id_fits_a_memo CHECK (octet_length(id) <= 28) NOT VALID;

-- Memos are matched after trimming and case-folding (payment_watcher.sql).
CREATE INDEX IF NOT EXISTS invoices_tenant_folded_id ON invoices (tenant_id, lower(id));

-- A schedule created inactive is paused from its creation (or from its anchor,
-- if that is earlier): switching it on bills from then, never the spell before.
CREATE OR REPLACE FUNCTION billing_record_inactive_schedule() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO billing_schedule_pauses (schedule_id, paused_on)
    VALUES (NEW.id, least(NEW.anchor, billing_local_day(now(), NEW.tenant_id)))
    ON CONFLICT (schedule_id) WHERE resumed_on IS NULL DO NOTHING;
    RETURN NEW;
END $$;

DROP TRIGGER IF EXISTS billing_schedules_created_inactive ON billing_schedules;
CREATE TRIGGER billing_schedules_created_inactive
    AFTER INSERT ON billing_schedules
    FOR EACH ROW WHEN (NOT NEW.active)
    EXECUTE FUNCTION billing_record_inactive_schedule();

-- Amount changes against what was paid. An open or overdue invoice whose
-- amount is changed to what credited payments already cover is settled
-- (status paid); to less than they cover, settled and flagged overpaid
-- (overpaid: credited payments exceed the amount). A zero invoice with
-- nothing credited is settled by invoices_settle_zero (0006) as before.
ALTER TABLE invoices ADD COLUMN IF NOT EXISTS overpaid boolean NOT NULL DEFAULT false;

CREATE OR REPLACE FUNCTION billing_settle_against_credit() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    credited numeric := billing_credited(NEW.id);
BEGIN
    IF OLD.status IN ('open', 'overdue') AND NEW.status = OLD.status AND credited > 0
       AND credited >= NEW.amount_cents THEN
        NEW.status := 'paid';
        NEW.paid_at := coalesce(NEW.paid_at, now());
        NEW.overpaid := credited > NEW.amount_cents;
    END IF;
    RETURN NEW;
END $$;

-- Named to run before invoices_settle_zero (triggers fire in name order).
DROP TRIGGER IF EXISTS invoices_amount_against_credit ON invoices;
CREATE TRIGGER invoices_amount_against_credit
    BEFORE UPDATE OF amount_cents ON invoices
    FOR EACH ROW WHEN (OLD.amount_cents IS DISTINCT FROM NEW.amount_cents)
    EXECUTE FUNCTION billing_settle_against_credit();

-- The webhook event of a settlement made by a change of amount, in the
-- transaction of the change: the outbox rows of events/outbox.sql
-- (fan_out), with the event id events/types.py derives.
CREATE OR REPLACE FUNCTION billing_queue_event(event_type text, invoice_id text, tenant text, payload jsonb)
RETURNS void
LANGUAGE sql AS $$
    WITH seq AS (SELECT nextval('webhook_event_sequence') AS n)
    INSERT INTO webhook_outbox (event_id, webhook_id, event_type, tenant_id, payload, event_sequence)
    SELECT 'evt_' || left(encode(sha256(convert_to(event_type || ':' || invoice_id, 'UTF8')), 'hex'), 32),
           s.id, event_type, tenant, payload, seq.n
      FROM webhook_subscriptions s CROSS JOIN seq
     WHERE s.deleted_at IS NULL AND s.tenant_id = tenant
       AND (s.event_types IS NULL OR event_type = ANY (s.event_types))
    ON CONFLICT (webhook_id, event_id) DO NOTHING
$$;

-- The merchant's view of an invoice's money, in whole minor units of its
-- currency (as Stripe's invoice object): amount_due, amount_paid (what
-- credited payments cover, rounded down) and amount_remaining (rounded up,
-- never negative).
CREATE OR REPLACE FUNCTION billing_invoice_amounts(amount_cents bigint, credited numeric) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jsonb_build_object('amount_due', amount_cents, 'amount_paid', floor(credited)::bigint,
                              'amount_remaining', greatest(ceil(amount_cents - credited), 0)::bigint)
$$;

CREATE OR REPLACE FUNCTION billing_record_amount_settlement() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    credited numeric := billing_credited(NEW.id);
    payload jsonb;
BEGIN
    IF credited = 0 THEN
        RETURN NULL;  -- a zero invoice nobody paid: invoices_settle_zero's case, no event
    END IF;
    payload := jsonb_build_object('invoice_id', NEW.id, 'tenant_id', NEW.tenant_id,
                                  'amount_cents', NEW.amount_cents, 'currency', NEW.currency,
                                  'paid_at', NEW.paid_at, 'settled_by', 'amount_change',
                                  'overpaid', NEW.overpaid) || billing_invoice_amounts(NEW.amount_cents, credited);
    INSERT INTO invoice_status_history (invoice_id, from_status, to_status, job)
    VALUES (NEW.id, OLD.status, 'paid', 'amount_change')
    ON CONFLICT (invoice_id, from_status, to_status) DO NOTHING;
    INSERT INTO activity_events (event_key, tenant_id, invoice_id, kind, detail)
    VALUES ('invoice.paid:' || NEW.id, NEW.tenant_id, NEW.id, 'invoice.paid', payload)
    ON CONFLICT (event_key) DO NOTHING;
    PERFORM billing_queue_event('invoice.paid', NEW.id, NEW.tenant_id, payload);
    IF NEW.overpaid THEN
        INSERT INTO activity_events (event_key, tenant_id, invoice_id, kind, detail)
        VALUES ('invoice.overpaid:' || NEW.id, NEW.tenant_id, NEW.id, 'invoice.overpaid', payload)
        ON CONFLICT (event_key) DO NOTHING;
        PERFORM billing_queue_event('payment.overpaid', NEW.id, NEW.tenant_id, payload);
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS invoices_amount_settled ON invoices;
CREATE TRIGGER invoices_amount_settled
    AFTER UPDATE OF amount_cents ON invoices
    FOR EACH ROW WHEN (OLD.amount_cents IS DISTINCT FROM NEW.amount_cents
                       AND OLD.status IN ('open', 'overdue') AND NEW.status = 'paid')
    EXECUTE FUNCTION billing_record_amount_settlement();

-- One feed per receiving account. The payment watcher keeps a cursor row per
-- account (payment_cursors.poller = WATCHER:ACCOUNT, billing/payment_watcher.py
-- cursor_name) whose ledger_read_to is capped at what the payments source
-- itself says it has ingested. What the watcher has read for a tenant is the
-- least of its accounts' feeds: -infinity for a feed never read, NULL for a
-- tenant with no receiving account (no feed covers it: its invoices are held,
-- never dunned blind).
CREATE OR REPLACE FUNCTION billing_tenant_read_to(watcher text, tenant text) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN count(*) = 0 THEN NULL ELSE min(coalesce(c.ledger_read_to, '-infinity')) END
      FROM payment_accounts a
      LEFT JOIN payment_cursors c ON c.poller = watcher || ':' || a.account_id
     WHERE a.tenant_id = tenant
$$;

-- The outbox is sent in event sequence order (events/outbox.sql, lock_unsent).
CREATE INDEX IF NOT EXISTS webhook_outbox_unsent_by_sequence ON webhook_outbox (event_sequence) WHERE sent_at IS NULL;
