-- Recover and replay a subscription's deliveries (recovery.py).

-- name: requeue_window --
-- In: webhook_id, since, until (epoch seconds: the event's time, occurred_at or
-- else the delivery's creation, in [since, until)), statuses (text[]: which
-- deliveries to send again). Out: the re-queued rows, in event order, with
-- the status each had and the generation its queue item must carry.
-- Each row gets a new generation, token 0 and the whole retry schedule (as a
-- redrive does): a claim taken before, by a retry worker that has not stamped
-- it yet, is fenced off by the generation, so it never POSTs. A delivery being
-- attempted (pending, attempting) is not a candidate: its holder's outcome
-- decides. FOR UPDATE waits for a holder recording its outcome right now and
-- then re-checks the row as committed: one that succeeded meanwhile is not
-- sent again. Runs after lock_subscription (the order record_held locks in).
-- The rows are locked in id order, as every statement that locks several
-- deliveries does (a retry batch's stamps, starts and outcomes), so none deadlock.
WITH chosen AS (
    SELECT id, status FROM webhook_deliveries
     WHERE webhook_id = %(webhook_id)s
       AND coalesce(occurred_at, created_at) >= to_timestamp(%(since)s::float8)
       AND coalesce(occurred_at, created_at) < to_timestamp(%(until)s::float8)
       AND status = ANY (%(statuses)s::text[])
     ORDER BY id
       FOR UPDATE
)
UPDATE webhook_deliveries d
   SET status = 'retrying', generation = d.generation + 1, fence_token = 0, attempts = 0,
       next_attempt_at = now(), updated_at = now()
  FROM chosen
 WHERE d.id = chosen.id AND d.status = ANY (%(statuses)s::text[])
RETURNING d.id, d.generation, chosen.status AS previous_status,
          coalesce(d.occurred_at, d.created_at) AS event_time, d.event_sequence;
