-- Per-endpoint rate limits (endpoint_limits.py): one token bucket per
-- subscription in webhook_endpoint_buckets (0008_webhook_subscription_management.sql).

-- name: take_rate_token --
-- In: webhook_id, rate (tokens per second; the bucket holds at most
-- greatest(rate, 1)). Out: a row when a token was taken, else NO row.
-- ONE statement: the conflicting row's lock serialises every taker of the
-- subscription, and each re-reads the bucket its predecessor committed, so two
-- attempts never take the same token. The refill uses the later of the row's
-- time and this statement's clock (taken before any lock wait), so a waiter
-- never refills for time that did not pass.
INSERT INTO webhook_endpoint_buckets AS b (webhook_id, tokens, refilled_at)
VALUES (%(webhook_id)s, greatest(%(rate)s::float8, 1) - 1, clock_timestamp())
ON CONFLICT (webhook_id) DO UPDATE
   SET tokens = least(greatest(%(rate)s::float8, 1),
                      b.tokens + %(rate)s::float8
                                 * greatest(0, extract(epoch FROM EXCLUDED.refilled_at - b.refilled_at))) - 1,
       refilled_at = greatest(b.refilled_at, EXCLUDED.refilled_at)
 WHERE least(greatest(%(rate)s::float8, 1),
             b.tokens + %(rate)s::float8
                        * greatest(0, extract(epoch FROM EXCLUDED.refilled_at - b.refilled_at))) >= 1
RETURNING b.tokens;
