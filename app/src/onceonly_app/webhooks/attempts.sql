-- The attempt history of a subscription (attempts.py): every POST recorded in
-- webhook_attempts, a stale one refused by the fence included.

-- name: attempt_history --
-- In: webhook_id, delivery_id (or NULL: all of the subscription's), retention
-- (seconds: older attempts are not listed), limit. Out: the newest attempts
-- first. latency_ms: from the attempt's start to its outcome's record (DNS,
-- connection, request and answer). Served by webhook_attempts_delivery.
SELECT t.id, t.delivery_id, d.event_id, d.event_type, t.generation, t.attempt, t.outcome,
       t.response_code, t.error, t.recorded, t.started_at,
       round((extract(epoch FROM t.finished_at - t.started_at) * 1000)::numeric, 1)::float8 AS latency_ms
  FROM webhook_deliveries d
  JOIN webhook_attempts t ON t.delivery_id = d.id
 WHERE d.webhook_id = %(webhook_id)s
   AND (%(delivery_id)s::text IS NULL OR d.id = %(delivery_id)s::text)
   AND t.started_at > now() - make_interval(secs => %(retention)s::float8)
 ORDER BY t.started_at DESC, t.id DESC
 LIMIT %(limit)s;

-- name: delivery_of --
-- In: webhook_id, delivery_id. Out: a row if the delivery is the subscription's.
SELECT 1 FROM webhook_deliveries WHERE id = %(delivery_id)s AND webhook_id = %(webhook_id)s;
