-- Webhooks per tenant: a subscription belongs to one tenant, an
-- event goes only to its tenant's subscriptions, and every delivery remembers
-- whose event it carries, so an attempt can refuse to send it elsewhere.
-- Also the two fields a receiver needs to order events itself: the event's
-- time and a sequence number. See docs/webhooks.md ("Tenants", "Ordering").

ALTER TABLE webhook_subscriptions ADD COLUMN IF NOT EXISTS tenant_id text;
ALTER TABLE webhook_deliveries ADD COLUMN IF NOT EXISTS tenant_id text;
ALTER TABLE webhook_deliveries ADD COLUMN IF NOT EXISTS occurred_at timestamptz;
ALTER TABLE webhook_deliveries ADD COLUMN IF NOT EXISTS event_sequence bigint;
ALTER TABLE webhook_outbox ADD COLUMN IF NOT EXISTS event_sequence bigint;

-- One number per event, taken in the transaction of the change. Two changes of
-- one invoice lock its row in turn, so the later change takes the larger number.
CREATE SEQUENCE IF NOT EXISTS webhook_event_sequence;

-- Rows from before this migration have no tenant. When the database knows
-- exactly one tenant (a single-tenant install), they are that tenant's: nothing
-- changes for it. With several tenants nobody can tell whose a subscription is
-- (it received every tenant's events): it stays without a tenant, gets no new
-- event, and an attempt of a delivery still in flight to it is refused, until
-- an operator sets its tenant_id (and re-drives what was refused).
-- A delivery's tenant is its event's: the outbox row it came from knows it; in a
-- single-tenant install it is the one tenant.
UPDATE webhook_deliveries d SET tenant_id = o.tenant_id
  FROM webhook_outbox o
 WHERE d.tenant_id IS NULL AND o.webhook_id = d.webhook_id AND o.event_id = d.event_id;

WITH known AS (
    SELECT tenant_id FROM invoices
    UNION SELECT tenant_id FROM billing_schedules
    UNION SELECT tenant_id FROM webhook_outbox
    UNION SELECT tenant_id FROM billing_tenants  -- 0003_billing_correctness.sql
    UNION SELECT tenant_id FROM payment_accounts
), only_one AS (
    SELECT min(tenant_id) AS tenant_id FROM known HAVING count(*) = 1
), subscriptions AS (
    UPDATE webhook_subscriptions s SET tenant_id = only_one.tenant_id, updated_at = now()
      FROM only_one
     WHERE s.tenant_id IS NULL
)
UPDATE webhook_deliveries d SET tenant_id = only_one.tenant_id
  FROM only_one
 WHERE d.tenant_id IS NULL;

-- New subscriptions must name their tenant. NOT VALID: the check holds for every
-- row written from now on, while rows left without a tenant above stay as they are.
ALTER TABLE webhook_subscriptions
    ADD CONSTRAINT webhook_subscriptions_tenant_required CHECK (tenant_id IS NOT NULL) NOT VALID;

CREATE INDEX IF NOT EXISTS webhook_subscriptions_by_tenant
    ON webhook_subscriptions (tenant_id) WHERE enabled;

-- attempts counts the attempts STARTED since this migration (deliveries.sql,
-- start_attempt), no longer the outcomes recorded: see docs/webhooks.md.
COMMENT ON COLUMN webhook_deliveries.attempts IS
    'attempts started in this generation, counted before each request (start_attempt)';
