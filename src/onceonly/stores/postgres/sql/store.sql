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
    payload       json,                 -- the JSON text as put, kept verbatim (see below)
    claimable_at  timestamptz NOT NULL, -- due time, or lease expiry while in flight
    token         bigint NOT NULL DEFAULT 0,
    attempt       integer NOT NULL DEFAULT 0,
    owner         text,                 -- set while in flight
    PRIMARY KEY (queue, item_id)
);
-- payload is json, not jsonb: jsonb re-encodes numbers (1e16 comes back an
-- int, -0.0 as 0.0, a float near 2**60 as another number), and a payload must
-- come back as put, as on Redis and DynamoDB. Tables of 0.2 and earlier have
-- jsonb: converted once, here (a rewrite of the table under its exclusive
-- lock; docs/coordination.md). Their rows keep the values jsonb made of them.
DO $$
BEGIN
    IF (SELECT data_type FROM information_schema.columns
         WHERE table_schema = current_schema() AND table_name = 'onceonly_queue'
           AND column_name = 'payload') = 'jsonb' THEN
        ALTER TABLE onceonly_queue ALTER COLUMN payload TYPE json USING payload::json;
    END IF;
END $$;
-- The claim's index. When the statistics do not know a queue yet (it grew
-- since the last ANALYZE), the planner rates every index on the queue name at
-- one row and takes the cheapest, walking the whole queue in it:
-- - partial, with a predicate that claim's "claimable_at <= now" implies and
--   a lookup by id does not, so a lookup by id cannot pick it;
-- - keyed by the queue name in the "C" collation, which the claim asks for
--   and the primary key (the column's own collation) cannot serve: otherwise
--   a claim index grown by churn (each claim adds an entry for the new
--   claimable_at) loses to the smaller primary key, and the claim reads the
--   queue's every item. Equality of text is the same in every deterministic
--   collation.
-- It replaces the claim indexes of earlier versions (dropped when present;
-- the build locks the table against writes for a moment, once).
CREATE INDEX IF NOT EXISTS onceonly_queue_ready ON onceonly_queue (queue COLLATE "C", claimable_at)
    WHERE claimable_at IS NOT NULL;
DROP INDEX IF EXISTS onceonly_queue_claimable, onceonly_queue_due;
-- A hot queue churns: every claim and ack leaves a dead row version (a claim
-- moves claimable_at, which is indexed, so it is never a HOT update). Vacuum
-- it by a fixed number of dead rows instead of 20% of the table, and leave
-- room in each page for the new versions. Set once, on a table without
-- storage options: ALTER TABLE ... SET takes a lock that waits for running
-- statements, and options you set yourself are kept (docs/coordination.md).
DO $$
BEGIN
    IF (SELECT reloptions FROM pg_class WHERE oid = 'onceonly_queue'::regclass) IS NULL THEN
        ALTER TABLE onceonly_queue SET (fillfactor = 80, autovacuum_vacuum_scale_factor = 0,
                                        autovacuum_vacuum_threshold = 1000);
    END IF;
END $$;
-- One row per counting semaphore: its live holders, holder id -> expiry
-- (epoch seconds, server clock). One row, so its lock serialises the takes of
-- one semaphore; created here like the rest, so setup() on an install from
-- before it adds it.
CREATE TABLE IF NOT EXISTS onceonly_semaphores (
    name     text PRIMARY KEY,
    holders  jsonb NOT NULL
);

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

-- name: take_permits --
-- In: names[], holders[] (random ids), limits[] (the names distinct), ttl
-- (seconds). Out: a row (name, expires_at) per permit taken; none for a
-- semaphore whose limit live holders hold. Each semaphore is taken as alone:
-- closes the count-then-add race: the conflict takes the semaphore row's
-- lock, and the count of live holders (expiry after now) and the add are
-- checked and written under it, on the row's latest version. Holders whose
-- ttl ended are dropped in the same write: a crashed holder's place frees
-- itself. The limit is the caller's on every take, so a lowered one admits
-- nobody until the live holders fall below it. The rows are locked in name
-- order, so takers of overlapping sets never wait on each other in a cycle.
-- "now" is read once (clock CTE).
WITH clock AS (SELECT extract(epoch FROM clock_timestamp())::float8 AS now),
wanted AS (
    SELECT * FROM unnest(%(names)s::text[], %(holders)s::text[], %(limits)s::int[]) AS w(name, holder, lim)
)
INSERT INTO onceonly_semaphores AS s (name, holders)
SELECT w.name, jsonb_build_object(w.holder, clock.now + %(ttl)s) FROM wanted w, clock
 ORDER BY w.name
ON CONFLICT (name) DO UPDATE
   SET holders = (SELECT coalesce(jsonb_object_agg(h.key, h.value), '{}'::jsonb)
                    FROM jsonb_each(s.holders) AS h
                   WHERE h.value::float8 > (SELECT now FROM clock))
                 || EXCLUDED.holders
 WHERE (SELECT count(*) FROM jsonb_each(s.holders) AS h
         WHERE h.value::float8 > (SELECT now FROM clock)) < (SELECT w.lim FROM wanted w WHERE w.name = s.name)
RETURNING s.name, (s.holders ->> (SELECT w.holder FROM wanted w WHERE w.name = s.name))::float8 AS expires_at;

-- name: return_permits --
-- In: names[], holders[] (one permit each). Out: a row (name, holder, held)
-- per permit that was there: held = true if it was live, false if its ttl
-- had ended; no row for one that was not there (returned already, or dropped
-- by a take after it ended). Only the given holders' entries are removed, so
-- a stale or repeated return frees no other place. The rows are locked
-- (FOR UPDATE, in name order: two callers never wait on each other in a
-- cycle), so the entries read are the ones removed.
WITH given AS (
    SELECT * FROM unnest(%(names)s::text[], %(holders)s::text[]) AS g(name, holder)
), held AS MATERIALIZED (
    SELECT name, holders FROM onceonly_semaphores
     WHERE name IN (SELECT name FROM given)
     ORDER BY name
       FOR UPDATE
), removed AS (
    UPDATE onceonly_semaphores s
       SET holders = s.holders - ARRAY(SELECT g.holder FROM given g WHERE g.name = s.name)
      FROM held
     WHERE s.name = held.name
)
SELECT g.name, g.holder, (h.holders ->> g.holder)::float8 > extract(epoch FROM clock_timestamp()) AS held
  FROM given g JOIN held h ON h.name = g.name AND h.holders ? g.holder;

-- name: inspect --
SELECT name, owner, token, extract(epoch FROM busy_until)::float8 AS busy_until, completed
  FROM onceonly_leases WHERE name = %(name)s;

-- name: put_many --
-- In: queue, item_ids[], payloads[] (json text), due_ats[] (epoch seconds or
-- NULL = now), parallel arrays with each id at most once (a row cannot be
-- changed twice by one ON CONFLICT statement). put is a batch of one.
-- Rescheduling clears the owner, so a holder's ack/retry is refused afterwards.
INSERT INTO onceonly_queue AS q (queue, item_id, payload, claimable_at)
SELECT %(queue)s, i.item_id, i.payload::json, COALESCE(to_timestamp(i.due_at), clock_timestamp())
  FROM unnest(%(item_ids)s::text[], %(payloads)s::text[], %(due_ats)s::float8[]) AS i(item_id, payload, due_at)
ON CONFLICT (queue, item_id) DO UPDATE
    SET payload = EXCLUDED.payload, claimable_at = EXCLUDED.claimable_at, owner = NULL;

-- name: put_if_absent --
-- In: as put_many. Out: the ids put. An id the queue already holds, in any
-- state (waiting, due or claimed), is left exactly as it is: its holder keeps
-- it. ON CONFLICT DO NOTHING waits for a concurrent insert of the same id and
-- then skips it, so of two racing callers one puts the item.
INSERT INTO onceonly_queue AS q (queue, item_id, payload, claimable_at)
SELECT %(queue)s, i.item_id, i.payload::json, COALESCE(to_timestamp(i.due_at), clock_timestamp())
  FROM unnest(%(item_ids)s::text[], %(payloads)s::text[], %(due_ats)s::float8[]) AS i(item_id, payload, due_at)
ON CONFLICT (queue, item_id) DO NOTHING
RETURNING item_id;

-- name: cancel --
-- In: queue, item_id. Out: a row if the item was removed. One primary-key
-- lookup, whatever the statistics say.
DELETE FROM onceonly_queue WHERE queue = %(queue)s AND item_id = %(item_id)s RETURNING item_id;

-- name: cancel_many --
-- In: queue, item_ids (text[]). Out: a row per item removed.
DELETE FROM onceonly_queue WHERE queue = %(queue)s AND item_id = ANY (%(item_ids)s::text[]) RETURNING item_id;

-- name: claim_plan --
-- Runs before claim, in its transaction: no bitmap scans. A bitmap scan
-- cannot return the claim index's order, so it reads every due item and sorts
-- them to take the first few. The planner picks it when its statistics say
-- the queue is small (taken while it was empty, or before a backlog grew);
-- with it off, the claim walks the index in due order and stops at its limit.
-- Transaction-local: nothing is left on the connection.
SELECT set_config('enable_bitmapscan', 'off', true);

-- name: claim --
-- claim, ack_many and claim(acks=...) in one statement: one round trip per
-- batch of a worker loop. In: queue; the claims to ack as parallel arrays
-- item_ids[], tokens[], owners[] (empty to only claim); owner, limit (0 to
-- only ack) and lease (seconds) of the claim. Out: a row per claim deleted
-- (kind 'acked': item_id, token, owner) and per item granted (kind 'claimed').
--
-- Ack: a claim that was re-granted has another token/owner and stays. Each
-- claim is one primary-key lookup (LATERAL ... LIMIT 1 cannot be turned into a
-- hash join over the whole queue), locked so that the token and owner checked
-- are still the row's when it is deleted by ctid.
--
-- Claim: takes due items AND items whose lease ran out (claimable_at is the
-- lease expiry while in flight), so a crashed holder's work comes back by
-- itself. SKIP LOCKED lets concurrent claimers pass each other's rows instead
-- of queueing or double-taking them; the row lock re-checks claimable_at on
-- rows changed since the snapshot. MATERIALIZED keeps the planner from running
-- the CTE more than once and updating more than LIMIT rows (the Oban lesson).
-- The rows being acked are kept out (their lease may have run out): the parts
-- of one statement run in no promised order, and a row granted here before
-- its ack ran would be granted again instead of acked.
--
-- Its cost is the items it acks and takes, never the backlog, whatever the
-- statistics:
-- - "now" is read once, as a sub-select (an InitPlan). A bare clock_timestamp()
--   is volatile, so it could only filter the index range row by row (every
--   scheduled and in-flight item, on every claim); a value computed before
--   the scan is an index condition, and the scan stops at the first item not
--   yet due;
-- - the queue name is compared in the "C" collation, which only the claim
--   index serves (see onceonly_queue_ready above);
-- - the UPDATE finds the locked rows by their ctid (a TID scan, the only plan
--   for it), not by a join that the planner may turn into a walk over the
--   queue when its statistics are stale (a queue that grew since ANALYZE).
--   The rows are locked, so their ctid cannot change. A row whose locked
--   version is newer than this statement's snapshot (a put just rescheduled
--   it) is skipped: it stays due for the next claim.
WITH held AS MATERIALIZED (
    SELECT r.ctid
      FROM unnest(%(item_ids)s::text[], %(tokens)s::bigint[], %(owners)s::text[]) AS c(item_id, token, owner)
     CROSS JOIN LATERAL (
        SELECT ctid FROM onceonly_queue
         WHERE queue = %(queue)s AND item_id = c.item_id AND token = c.token AND owner = c.owner
         LIMIT 1
           FOR UPDATE
     ) r
), acked AS (
    DELETE FROM onceonly_queue q
     WHERE q.ctid = ANY (ARRAY(SELECT ctid FROM held))
    RETURNING q.item_id, q.token, q.owner
), due AS MATERIALIZED (
    SELECT ctid FROM onceonly_queue
     WHERE queue COLLATE "C" = %(queue)s AND claimable_at <= (SELECT clock_timestamp())
       AND ctid <> ALL (ARRAY(SELECT ctid FROM held))
     ORDER BY claimable_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE onceonly_queue q
       SET token = q.token + 1,
           attempt = q.attempt + 1,
           owner = %(owner)s,
           claimable_at = clock_timestamp() + make_interval(secs => %(lease)s)
     WHERE q.ctid = ANY (ARRAY(SELECT ctid FROM due))
    RETURNING q.item_id, q.payload::text AS payload, q.token, q.attempt, q.owner,
              extract(epoch FROM q.claimable_at)::float8 AS lease_expires_at
)
SELECT 'claimed' AS kind, item_id, payload, token, attempt, owner, lease_expires_at FROM claimed
UNION ALL
SELECT 'acked', item_id, NULL, token, NULL, owner, NULL FROM acked;

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
