-- Billing, exactly and only when due (issue 18). See docs/scheduled-jobs.md.

-- Received amounts are kept exactly: payments.amount_cents is the amount in
-- minor units of its currency with the ledger's 7 decimals (50.005 USDC is
-- 5000.5 cents), so partial payments sum to exactly what was paid and are
-- compared with the invoice's whole minor units exactly. Rows recorded before
-- keep the whole minor units they were credited with.
ALTER TABLE payments ALTER COLUMN amount_cents TYPE numeric(38, 7);
