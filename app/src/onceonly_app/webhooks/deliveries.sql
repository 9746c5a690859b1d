-- Statements of webhook delivery on the domain database. Each sits under a
-- "-- name: NAME --" header (onceonly_app.sql_queries). Every write that records
-- an attempt's outcome is ONE statement fenced by (generation, fence_token).

-- name: create_deliveries --
-- In: rows, a JSON array of {id, webhook_id, tenant_id, event_id, event_type,
-- payload, occurred_at, sequence} (one SQS batch). Out: a row (kind 'known', id,
-- max_in_flight, rate_per_second, sendable: enabled and not deleted) per
-- webhook_id of the input that names a subscription (deleted ones too: their
-- deliveries end dropped), and a row (kind 'created', id) per delivery
-- this statement created. A row whose webhook_id names no subscription is not
-- inserted; a delivery (webhook_id, event_id) already had gives no 'created'
-- row, and one listed twice gives one (the caller lets its first record make
-- the attempt; the other is a duplicate). Closes the duplicate race: of two
-- invocations handling the same event, only the one whose insert created the
-- row makes the first attempt.
-- No conflict target: the id is derived from (webhook_id, event_id), so one
-- fact has two unique indexes (the primary key and webhook_deliveries_once),
-- and a racing insert may meet either first; naming one would let the other
-- raise a unique violation instead of answering "duplicate". Rows are inserted
-- in id order: two batches sharing deliveries wait for each other's insert of
-- the first one they share, instead of each holding one the other waits for (a deadlock).
WITH input AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb)
        AS r(id text, webhook_id text, tenant_id text, event_id text, event_type text, payload jsonb,
             occurred_at timestamptz, sequence bigint)
), known AS (
    SELECT s.id, s.max_in_flight, s.rate_per_second, s.enabled AND s.deleted_at IS NULL AS sendable
      FROM webhook_subscriptions s WHERE s.id IN (SELECT webhook_id FROM input)
), created AS (
    INSERT INTO webhook_deliveries (id, webhook_id, tenant_id, event_id, event_type, payload, occurred_at,
                                    event_sequence)
    SELECT r.id, r.webhook_id, r.tenant_id, r.event_id, r.event_type, r.payload, r.occurred_at, r.sequence
      FROM input r
     WHERE r.webhook_id IN (SELECT id FROM known)
     ORDER BY r.id
    ON CONFLICT DO NOTHING
    RETURNING id
)
SELECT 'known' AS kind, id, max_in_flight, rate_per_second, sendable FROM known
UNION ALL
SELECT 'created', id, NULL, NULL, NULL FROM created;

-- name: untouched_delivery --
-- In: id. Out: the row's creation time (epoch) if nobody has recorded an
-- attempt or stamped a claim on it yet, else NO row. Such a delivery's creator
-- is either still making the first attempt or died, maybe before it queued the
-- safety net (then nothing else would ever attempt it): a redelivered message
-- re-arms the net, whenever SQS happens to bring it back.
SELECT extract(epoch FROM created_at)::float8 AS created_at FROM webhook_deliveries
 WHERE id = %(id)s AND status = 'pending' AND attempts = 0 AND fence_token = 0 AND generation = 0;

-- name: start_attempts --
-- In: rows, a JSON array of {id, generation, token} (distinct ids), max_attempts.
-- Out: for each holder that may attempt, everything its attempt needs, the
-- subscription and the attempt's number included; NO row for one that was
-- fenced off (a newer token, a redrive, a finished delivery) or whose every
-- allowed attempt has started. The attempt is counted here, BEFORE the request,
-- in its own commit: a worker that dies mid-attempt, or cannot read the
-- response, has still used one, so a poison delivery runs out. Each row is
-- fenced on its own; the rows are locked in id order, so two batches never deadlock.
-- previous_secrets: the rotated-out secrets still inside their overlap, newest first.
WITH input AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS r(id text, generation int, token bigint)
), locked AS (
    SELECT d.id FROM webhook_deliveries d JOIN input i ON i.id = d.id ORDER BY d.id FOR NO KEY UPDATE OF d
)
UPDATE webhook_deliveries d
   SET attempts = d.attempts + 1, updated_at = now()
  FROM input i, webhook_subscriptions s
 WHERE d.id = i.id AND d.id IN (SELECT id FROM locked) AND s.id = d.webhook_id
   AND d.generation = i.generation AND d.fence_token = i.token
   AND d.status IN ('pending', 'attempting')
   AND d.attempts < %(max_attempts)s
RETURNING d.id, d.tenant_id, d.event_type, d.payload, d.attempts AS attempt, d.event_sequence, d.event_id,
          extract(epoch FROM coalesce(d.occurred_at, d.created_at))::float8 AS occurred_at,
          s.id AS webhook_id, s.tenant_id AS subscription_tenant_id, s.url, s.secret, s.enabled,
          s.deleted_at IS NOT NULL AS deleted, s.max_in_flight, s.rate_per_second, s.headers, d.deferrals,
          extract(epoch FROM s.failing_since)::float8 AS failing_since,
          ARRAY(SELECT p ->> 'secret' FROM jsonb_array_elements(s.previous_secrets) p
                 WHERE (p ->> 'until')::float8 > extract(epoch FROM now())
                 ORDER BY (p ->> 'until')::float8 DESC) AS previous_secrets;

-- name: stamp_fences --
-- In: rows, a JSON array of {id, generation, token} (the queue claims'; distinct
-- ids). Out: per delivery stamped, its id and the status it had before
-- (previous_status); NO row for one refused: a newer holder stamped a higher
-- token, the generation moved on (redrive), or the delivery is finished.
-- previous_status 'pending'/'attempting' means the last holder never recorded
-- its outcome: its lease was reclaimed. The CTE's row locks (in id order, so
-- two batches never deadlock) serialise concurrent stamps of one delivery.
WITH input AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS r(id text, generation int, token bigint)
), prev AS (
    SELECT d.id, d.status FROM webhook_deliveries d JOIN input i ON i.id = d.id ORDER BY d.id FOR UPDATE OF d
)
UPDATE webhook_deliveries d
   SET fence_token = i.token, status = 'attempting', updated_at = now()
  FROM prev, input i
 WHERE d.id = prev.id AND i.id = d.id
   AND d.generation = i.generation
   AND d.fence_token < i.token
   AND d.status IN ('pending', 'attempting', 'retrying')
RETURNING d.id, prev.status AS previous_status;

-- name: delivery_state --
SELECT webhook_id, status, generation, fence_token, attempts FROM webhook_deliveries WHERE id = %(id)s;

-- name: record_outcomes --
-- In: rows, a JSON array of {id, generation, token, outcome, status (the
-- delivery's new status), response_code, error, next_attempt_at (epoch or
-- null), started_at (epoch)} (distinct ids). Out: per row of the input its id,
-- recorded (bool) and the delivery's attempt number (counted by start_attempts).
-- The fenced UPDATE and the attempts-log INSERT are one statement: the log
-- always gains a row per input (a refused, stale attempt too, recorded =
-- false), while a delivery only changes if its (generation, fence_token) still
-- match, so a holder that lost its lease cannot overwrite a newer attempt's
-- result. Rows are locked in id order, so two batches never deadlock.
WITH input AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb)
        AS r(id text, generation int, token bigint, outcome text, status text, response_code int, error text,
             next_attempt_at float8, started_at float8)
), locked AS (
    SELECT d.id FROM webhook_deliveries d JOIN input i ON i.id = d.id ORDER BY d.id FOR NO KEY UPDATE OF d
), upd AS (
    UPDATE webhook_deliveries d
       SET status = i.status,
           response_code = i.response_code,
           last_error = i.error,
           next_attempt_at = to_timestamp(i.next_attempt_at),
           delivered_at = CASE WHEN i.status = 'succeeded' THEN now() ELSE d.delivered_at END,
           updated_at = now()
      FROM input i
     WHERE d.id = i.id AND d.id IN (SELECT id FROM locked)
       AND d.generation = i.generation AND d.fence_token = i.token
       AND d.status IN ('pending', 'attempting')
    RETURNING d.id, d.attempts
)
INSERT INTO webhook_attempts (delivery_id, generation, fence_token, attempt, outcome, response_code,
                              error, recorded, started_at)
SELECT i.id, i.generation, i.token, upd.attempts, i.outcome, i.response_code, i.error, upd.id IS NOT NULL,
       to_timestamp(i.started_at)
  FROM input i LEFT JOIN upd ON upd.id = i.id
RETURNING delivery_id AS id, recorded, attempt;

-- name: defer_attempt --
-- In: id, generation, token, next_attempt_at (epoch), retention (seconds).
-- Out: the attempts count and the status written, or NO row when fenced off.
-- The endpoint was at its limit, so no request was made: the attempt
-- start_attempts counted is given back, deferrals counts one more (the
-- in-flight cap's delay grows with it), and the delivery waits as retrying
-- (its queue item is moved to next_attempt_at by the caller). Waiting is
-- bounded: a delivery whose event is older than the retention when it is held
-- back once more ends expired instead (visible, not sent), so no limit defers
-- it for ever. No attempts-log row: nothing was attempted. last_error stays
-- the last real one (or says why it expired).
UPDATE webhook_deliveries
   SET attempts = attempts - 1, deferrals = deferrals + 1,
       status = CASE WHEN coalesce(occurred_at, created_at) < now() - make_interval(secs => %(retention)s::float8)
                     THEN 'expired' ELSE 'retrying' END,
       next_attempt_at = CASE WHEN coalesce(occurred_at, created_at)
                                   < now() - make_interval(secs => %(retention)s::float8)
                              THEN NULL ELSE to_timestamp(%(next_attempt_at)s::float8) END,
       last_error = CASE WHEN coalesce(occurred_at, created_at)
                              < now() - make_interval(secs => %(retention)s::float8)
                         THEN format('held back by the endpoint''s limit for longer than the retention of %%s s: '
                                     'not sent', %(retention)s::float8)
                         ELSE last_error END,
       updated_at = now()
 WHERE id = %(id)s AND generation = %(generation)s AND fence_token = %(token)s
   AND status IN ('pending', 'attempting') AND attempts > 0
RETURNING attempts, status, deferrals;

-- name: rotate_secret --
-- In: webhook_id, secret (the new one), overlap (seconds), keep (how many
-- previous secrets at most). Out: the row's id, or NO row for an unknown
-- subscription. The replaced secret stays valid for `overlap` seconds (an
-- overlap of 0 retires it at once); secrets past their overlap are dropped
-- here. One statement on the row: a rotation running meanwhile waits for its
-- lock, then re-reads the row (READ COMMITTED re-check), so neither loses the
-- other's secret. Read-then-write in two statements would lose one.
UPDATE webhook_subscriptions
   SET previous_secrets = (
           SELECT coalesce(jsonb_agg(p ORDER BY (p ->> 'until')::float8 DESC), '[]')
             FROM (SELECT p FROM (
                       SELECT jsonb_build_object('secret', secret,
                                                 'until', extract(epoch FROM now()) + %(overlap)s::float8) AS p
                       UNION ALL
                       SELECT p FROM jsonb_array_elements(previous_secrets) p) candidates
                    WHERE (p ->> 'until')::float8 > extract(epoch FROM now())
                    ORDER BY (p ->> 'until')::float8 DESC
                    LIMIT %(keep)s) kept),
       secret = %(secret)s,
       updated_at = now()
 WHERE id = %(webhook_id)s
RETURNING id;

-- name: record_held --
-- In: id, generation, token, webhook_id, outcome ('disabled', or 'gone' for a
-- 410), response_code, error, started_at (epoch), gone_url (the URL that
-- answered 410, NULL for 'disabled'), reason (the subscription's
-- disabled_reason on a 410). Out: recorded, attempt and the delivery's new
-- status: 'held' while the subscription is disabled, 'dropped' once it is
-- deleted, 'retrying' (due now) when it is enabled after all.
-- One statement, fenced like record_outcome. It locks the subscription, then
-- the delivery: the order enable and delete (subscriptions.sql) lock them in,
-- so none of them deadlocks another.
-- - A 410 disables the subscription only if it still has the URL that answered:
--   a 410 from a request to the old URL, answered after the URL changed, must
--   not disable the new one; the delivery is then retried (at the new URL).
-- - That disable is recorded in webhook_subscription_audit (actor "endpoint").
-- - The lock makes an enable wait for this hold, or this hold see the enable:
--   held is only written while the subscription is disabled, so enabling it
--   (subscriptions.sql, release_held, a statement after its own lock) always
--   finds the delivery, and nothing stays held under an enabled subscription.
WITH mine AS (
    SELECT id FROM webhook_deliveries
     WHERE id = %(id)s AND generation = %(generation)s AND fence_token = %(token)s
       AND status IN ('pending', 'attempting')
), sub AS (
    SELECT s.id, s.url, s.enabled, s.deleted_at FROM webhook_subscriptions s
     WHERE s.id = %(webhook_id)s AND EXISTS (SELECT 1 FROM mine)
       FOR NO KEY UPDATE  -- not FOR UPDATE: new deliveries' foreign keys need not wait
), gone AS (
    UPDATE webhook_subscriptions s
       SET enabled = false, disabled_reason = %(reason)s, updated_at = now()
      FROM sub
     WHERE s.id = sub.id AND sub.enabled AND sub.url = %(gone_url)s::text
    RETURNING s.id
), gone_recorded AS (
    -- The 410's disable is a change too: in the audit, by the endpoint.
    INSERT INTO webhook_subscription_audit (webhook_id, action, actor, detail)
    SELECT id, 'disable', 'endpoint', jsonb_build_object('reason', %(reason)s::text, 'url', %(gone_url)s::text)
      FROM gone
), decided AS (
    SELECT CASE WHEN sub.deleted_at IS NOT NULL THEN 'dropped'
                WHEN NOT sub.enabled OR EXISTS (SELECT 1 FROM gone) THEN 'held'
                ELSE 'retrying' END AS status
      FROM sub
), upd AS (
    UPDATE webhook_deliveries d
       SET status = decided.status,
           response_code = %(response_code)s,
           last_error = CASE decided.status
                            WHEN 'held' THEN %(error)s
                            WHEN 'dropped' THEN 'subscription deleted'
                            ELSE 'not held: the subscription is enabled (again, or the 410 came from a URL '
                                 'it no longer has); retried now' END,
           next_attempt_at = CASE WHEN decided.status = 'retrying' THEN now() END,
           updated_at = now()
      FROM decided
     WHERE d.id = %(id)s AND d.generation = %(generation)s AND d.fence_token = %(token)s
       AND d.status IN ('pending', 'attempting')
    RETURNING d.attempts, d.status, extract(epoch FROM d.next_attempt_at)::float8 AS next_attempt_at
)
INSERT INTO webhook_attempts (delivery_id, generation, fence_token, attempt, outcome, response_code,
                              error, recorded, started_at)
SELECT %(id)s, %(generation)s, %(token)s, (SELECT attempts FROM upd), %(outcome)s, %(response_code)s,
       %(error)s, EXISTS (SELECT 1 FROM upd), to_timestamp(%(started_at)s::float8)
RETURNING recorded, attempt, (SELECT status FROM upd) AS status,
          (SELECT next_attempt_at FROM upd) AS next_attempt_at;

-- name: redrive_dead --
-- In: ids (text[] or NULL), webhook_id (or NULL), limit. Out: the re-driven rows.
-- A new generation and token 0: claims from before the redrive are fenced off by
-- the generation, and the new queue item's claims (token >= 1) pass the fence.
-- attempts restarts, so the delivery gets the whole retry schedule again; the
-- attempts log keeps every earlier attempt, tagged with its generation.
WITH chosen AS (
    SELECT id FROM webhook_deliveries
     WHERE status = 'dead'
       AND (%(ids)s::text[] IS NULL OR id = ANY (%(ids)s::text[]))
       AND (%(webhook_id)s::text IS NULL OR webhook_id = %(webhook_id)s::text)
     ORDER BY updated_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE webhook_deliveries d
   SET status = 'retrying', generation = d.generation + 1, fence_token = 0, attempts = 0,
       next_attempt_at = now(), updated_at = now()
  FROM chosen
 WHERE d.id = chosen.id
RETURNING d.id, d.generation;

-- name: dead_deliveries --
SELECT id, webhook_id, event_id, event_type, attempts, last_error, response_code,
       extract(epoch FROM updated_at)::float8 AS dead_since
  FROM webhook_deliveries
 WHERE status = 'dead' AND (%(webhook_id)s::text IS NULL OR webhook_id = %(webhook_id)s::text)
 ORDER BY updated_at
 LIMIT %(limit)s;

-- name: retrying_deliveries --
-- In: ids. Deliveries waiting for a retry (no holder is attempting them).
SELECT id, generation FROM webhook_deliveries WHERE id = ANY (%(ids)s::text[]) AND status = 'retrying';
