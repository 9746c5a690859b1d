-- Per-endpoint rate limits (endpoint_limits.py): one token bucket per
-- subscription in webhook_endpoint_buckets (0008_webhook_subscription_management.sql).

-- name: take_rate_tokens --
-- In: webhook_ids[] (distinct), rates[] (tokens per second each; a bucket
-- holds at most greatest(rate, 1)). Out: a row (webhook_id) per token taken;
-- none for a bucket with less than a whole token.
-- ONE statement: each conflicting row's lock serialises every taker of its
-- subscription, and each re-reads the bucket its predecessor committed, so two
-- attempts never take the same token. The rows are locked in id order, so
-- takers of overlapping sets never wait on each other in a cycle. The refill
-- uses the later of the row's time and this statement's clock (taken before
-- any lock wait), so a waiter never refills for time that did not pass.
WITH wanted AS (
    SELECT * FROM unnest(%(webhook_ids)s::text[], %(rates)s::float8[]) AS w(webhook_id, rate)
)
INSERT INTO webhook_endpoint_buckets AS b (webhook_id, tokens, refilled_at)
SELECT w.webhook_id, greatest(w.rate, 1) - 1, clock_timestamp() FROM wanted w
 ORDER BY w.webhook_id
ON CONFLICT (webhook_id) DO UPDATE
   SET tokens = (SELECT least(greatest(w.rate, 1),
                              b.tokens + w.rate * greatest(0, extract(epoch FROM EXCLUDED.refilled_at - b.refilled_at)))
                   FROM wanted w WHERE w.webhook_id = b.webhook_id) - 1,
       refilled_at = greatest(b.refilled_at, EXCLUDED.refilled_at)
 WHERE (SELECT least(greatest(w.rate, 1),
                     b.tokens + w.rate * greatest(0, extract(epoch FROM EXCLUDED.refilled_at - b.refilled_at)))
          FROM wanted w WHERE w.webhook_id = b.webhook_id) >= 1
RETURNING b.webhook_id;

-- name: reserve_rate_turn --
-- In: webhook_id, rate (tokens per second, at least MIN_RATE). Out: turn
-- (epoch seconds): when a request held back by the rate is due again, or NO
-- row if the bucket has no row yet (nothing was ever taken: due now).
-- The turn is the bucket's next token time (when its tokens reach 1 again), or
-- one token after the last turn handed out, whichever is later: every
-- delivery already waiting is counted, and each new one waits behind them
-- instead of all coming back at once to find the same empty bucket. A turn
-- handed out in the past no longer counts (greatest with the next token time).
-- The turn returned is 20 ms after the token's time: a delivery that comes back
-- a hair early (a queue's millisecond rounding) would find 0.99 of a token and
-- go to the back of the line.
-- ONE statement under the row's lock: two held-back deliveries never get the same turn.
UPDATE webhook_endpoint_buckets AS b
   SET reserved_until = greatest(
           b.refilled_at + make_interval(secs => greatest(0, 1 - b.tokens) / %(rate)s::float8),
           b.reserved_until + make_interval(secs => 1 / %(rate)s::float8),
           clock_timestamp())
 WHERE b.webhook_id = %(webhook_id)s
RETURNING extract(epoch FROM b.reserved_until)::float8 + 0.02 AS turn;
