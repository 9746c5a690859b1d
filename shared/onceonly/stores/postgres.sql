-- Queries of the PostgreSQL store. Each statement sits under a "-- name: NAME --"
-- header and is parsed once at import (stores/sqlfile.py). Every statement that
-- must be atomic is ONE statement, run in autocommit: one round trip, one
-- transaction. Times come from the server's clock (clock_timestamp()).

-- name: setup --
CREATE TABLE IF NOT EXISTS onceonly_leases (
    name        text PRIMARY KEY,
    owner       text,
    token       bigint NOT NULL,
    busy_until  timestamptz NOT NULL,   -- held until, or completed until
    completed   boolean NOT NULL DEFAULT false
);
-- expires: a completed record that may be deleted once busy_until (its keep)
-- has passed (complete(..., expire=True), e.g. one cron tick). Added here so
-- that tables created before it get it too; only when missing, because ALTER
-- TABLE locks the table exclusively even when IF NOT EXISTS finds the column.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                    WHERE table_schema = current_schema() AND table_name = 'onceonly_leases'
                      AND column_name = 'expires') THEN
        ALTER TABLE onceonly_leases ADD COLUMN expires boolean NOT NULL DEFAULT false;
    END IF;
END $$;
CREATE INDEX IF NOT EXISTS onceonly_leases_expiring ON onceonly_leases (busy_until) WHERE expires;
CREATE TABLE IF NOT EXISTS onceonly_queue (
    queue         text NOT NULL,
    item_id       text NOT NULL,
    payload       jsonb,
    claimable_at  timestamptz NOT NULL, -- due time, or lease expiry while in flight
    token         bigint NOT NULL DEFAULT 0,
    attempt       integer NOT NULL DEFAULT 0,
    owner         text,                 -- set while in flight
    PRIMARY KEY (queue, item_id)
);
CREATE INDEX IF NOT EXISTS onceonly_queue_claimable ON onceonly_queue (queue, claimable_at);

-- name: acquire --
-- In: name, owner, ttl (seconds). Out: the granted row, or no row on contention.
-- Closes the check-then-set race: the conflict check and the takeover are one
-- statement, and the row lock serialises concurrent takers. The token survives
-- release/expiry in the row, so it strictly increases across grants.
INSERT INTO onceonly_leases AS l (name, owner, token, busy_until, completed)
VALUES (%(name)s, %(owner)s, 1, clock_timestamp() + make_interval(secs => %(ttl)s), false)
ON CONFLICT (name) DO UPDATE
    SET owner = EXCLUDED.owner, token = l.token + 1, busy_until = EXCLUDED.busy_until, completed = false,
        expires = false
    WHERE l.busy_until <= clock_timestamp()
RETURNING name, owner, token, extract(epoch FROM busy_until)::float8 AS expires_at;

-- name: renew --
-- In: name, owner, token, ttl. Out: the row, or none if a newer grant exists
-- (or the lease was completed/released).
UPDATE onceonly_leases
   SET busy_until = clock_timestamp() + make_interval(secs => %(ttl)s)
 WHERE name = %(name)s AND owner = %(owner)s AND token = %(token)s AND NOT completed
RETURNING name, owner, token, extract(epoch FROM busy_until)::float8 AS expires_at;

-- name: release --
-- In: name, owner, token. The owner is cleared so that a second release, or a
-- renew after release, is refused; the token stays for the next grant.
UPDATE onceonly_leases
   SET busy_until = clock_timestamp(), owner = NULL
 WHERE name = %(name)s AND owner = %(owner)s AND token = %(token)s AND NOT completed
RETURNING token;

-- name: complete --
-- In: name, owner, token, keep (seconds). Marks the name done for keep seconds;
-- the record is kept (expires stays false since the grant).
UPDATE onceonly_leases
   SET busy_until = clock_timestamp() + make_interval(secs => %(keep)s), completed = true
 WHERE name = %(name)s AND owner = %(owner)s AND token = %(token)s AND NOT completed
RETURNING token;

-- name: complete_and_prune --
-- complete with expire = true, plus a bounded prune in the same statement: up
-- to prune_limit records whose keep has passed are deleted, so a cron guard
-- that adds one record per tick also removes the old ones, with no extra round
-- trip and no scheduled cleaner. Every CTE sees the same snapshot, in which the
-- record being completed is not yet expiring, so it is never pruned here.
-- FOR UPDATE re-checks the condition on a row changed since the snapshot (an
-- acquire after keep clears expires) and SKIP LOCKED passes rows others hold.
WITH done AS (
    UPDATE onceonly_leases
       SET busy_until = clock_timestamp() + make_interval(secs => %(keep)s), completed = true, expires = true
     WHERE name = %(name)s AND owner = %(owner)s AND token = %(token)s AND NOT completed
    RETURNING token
), old AS MATERIALIZED (
    SELECT name FROM onceonly_leases
     WHERE expires AND completed AND busy_until <= now()
     LIMIT %(prune_limit)s
       FOR UPDATE SKIP LOCKED
), pruned AS (
    DELETE FROM onceonly_leases l USING old WHERE l.name = old.name
)
SELECT token FROM done;

-- name: prune_expired --
-- In: limit. Out: the names deleted. Completed records marked expires whose
-- keep has passed; long-lived names (never completed with expire) stay, so
-- their tokens keep increasing. Same locking as complete_and_prune.
WITH old AS MATERIALIZED (
    SELECT name FROM onceonly_leases
     WHERE expires AND completed AND busy_until <= now()
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
DELETE FROM onceonly_leases l USING old WHERE l.name = old.name
RETURNING l.name;

-- name: inspect --
SELECT name, owner, token, extract(epoch FROM busy_until)::float8 AS busy_until, completed
  FROM onceonly_leases WHERE name = %(name)s;

-- name: put_many --
-- In: queue, item_ids[], payloads[] (json text), due_ats[] (epoch seconds or
-- NULL = now), parallel arrays with each id at most once (a row cannot be
-- changed twice by one ON CONFLICT statement). put is a batch of one.
-- Rescheduling clears the owner, so a holder's ack/retry is refused afterwards.
INSERT INTO onceonly_queue AS q (queue, item_id, payload, claimable_at)
SELECT %(queue)s, i.item_id, i.payload::jsonb, COALESCE(to_timestamp(i.due_at), clock_timestamp())
  FROM unnest(%(item_ids)s::text[], %(payloads)s::text[], %(due_ats)s::float8[]) AS i(item_id, payload, due_at)
ON CONFLICT (queue, item_id) DO UPDATE
    SET payload = EXCLUDED.payload, claimable_at = EXCLUDED.claimable_at, owner = NULL;

-- name: cancel --
DELETE FROM onceonly_queue WHERE queue = %(queue)s AND item_id = %(item_id)s RETURNING item_id;

-- name: claim --
-- In: queue, owner, limit, lease (seconds). Out: the claimed rows.
-- Takes due items AND items whose lease ran out (claimable_at is the lease
-- expiry while in flight), so a crashed holder's work comes back by itself.
-- SKIP LOCKED lets concurrent claimers pass each other's rows instead of
-- queueing or double-taking them; the row lock re-checks claimable_at on rows
-- changed since the snapshot. MATERIALIZED keeps the planner from running the
-- CTE more than once and updating more than LIMIT rows (the Oban lesson).
-- Its cost is the due items it takes, never the backlog:
-- - "now" is read once (the CTE now). A bare clock_timestamp() is volatile,
--   so it could only filter the index range row by row (every scheduled and
--   in-flight item, on every claim); a value computed before the scan is an
--   index condition, and the scan stops at the first item not yet due;
-- - the UPDATE repeats that bound, so whichever index the planner picks to
--   find the locked rows (by primary key, or the claimable range when the
--   statistics of a queue that just grew are stale), it reads due items only.
--   Same value, so every row locked above passes it.
WITH now AS MATERIALIZED (
    SELECT clock_timestamp() AS t
), due AS MATERIALIZED (
    SELECT item_id FROM onceonly_queue
     WHERE queue = %(queue)s AND claimable_at <= (SELECT t FROM now)
     ORDER BY claimable_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE onceonly_queue q
   SET token = q.token + 1,
       attempt = q.attempt + 1,
       owner = %(owner)s,
       claimable_at = clock_timestamp() + make_interval(secs => %(lease)s)
 WHERE q.queue = %(queue)s AND q.claimable_at <= (SELECT t FROM now)
   AND q.item_id = ANY (ARRAY(SELECT item_id FROM due))
RETURNING q.item_id, q.payload, q.token, q.attempt, q.owner,
          extract(epoch FROM q.claimable_at)::float8 AS lease_expires_at;

-- name: ack_many --
-- In: queue, item_ids[], tokens[], owners[] (parallel arrays). Out: the grants
-- deleted. A claim that was re-granted has another token/owner and stays.
DELETE FROM onceonly_queue q
 USING unnest(%(item_ids)s::text[], %(tokens)s::bigint[], %(owners)s::text[]) AS c(item_id, token, owner)
 WHERE q.queue = %(queue)s AND q.item_id = c.item_id AND q.token = c.token AND q.owner = c.owner
RETURNING q.item_id, q.token, q.owner;

-- name: retry --
-- In: queue, item_id, token, owner, due_at. Back to waiting, if still held.
UPDATE onceonly_queue
   SET claimable_at = to_timestamp(%(due_at)s::float8), owner = NULL
 WHERE queue = %(queue)s AND item_id = %(item_id)s AND token = %(token)s AND owner = %(owner)s
RETURNING item_id;

-- name: depth --
SELECT count(*) FILTER (WHERE claimable_at <= now())                       AS due,
       count(*) FILTER (WHERE claimable_at > now() AND owner IS NULL)      AS scheduled,
       count(*) FILTER (WHERE claimable_at > now() AND owner IS NOT NULL)  AS in_flight
  FROM onceonly_queue WHERE queue = %(queue)s;
