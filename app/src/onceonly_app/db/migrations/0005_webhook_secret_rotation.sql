-- Signing-secret rotation with overlapping validity (docs/security.md,
-- "Rotating a signing secret"). `secret` stays the current secret; the secrets
-- it replaced are kept with the end of their overlap, newest first:
-- [{"secret": "whsec_…", "until": epoch seconds}, …]. Every attempt signs with
-- the current secret and each previous one still inside its overlap, all in
-- one webhook-signature header, so a receiver verifying with either passes.
ALTER TABLE webhook_subscriptions ADD COLUMN IF NOT EXISTS previous_secrets jsonb NOT NULL DEFAULT '[]';
