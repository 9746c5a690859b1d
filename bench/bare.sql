-- The bare PostgreSQL claim the field uses (procrastinate, pg-boss, Oban):
-- SKIP LOCKED UPDATE to take a batch, DELETE to finish it. No tokens, no
-- owners checked, no attempts, no payload: the floor onceonly is compared to.

-- name: setup --
CREATE TABLE IF NOT EXISTS bench_bare_queue (
    queue         text NOT NULL,
    item_id       text NOT NULL,
    claimable_at  timestamptz NOT NULL,
    PRIMARY KEY (queue, item_id)
);
CREATE INDEX IF NOT EXISTS bench_bare_queue_claimable ON bench_bare_queue (queue, claimable_at);

-- name: fill --
-- In: queue, n. Items i0 .. i(n-1), all due.
INSERT INTO bench_bare_queue (queue, item_id, claimable_at)
SELECT %(queue)s, 'i' || g, now() FROM generate_series(0, %(n)s - 1) AS g;

-- name: claim --
-- In: queue, limit. Out: the item ids taken (leased for 60 s).
WITH due AS MATERIALIZED (
    SELECT item_id FROM bench_bare_queue
     WHERE queue = %(queue)s AND claimable_at <= now()
     ORDER BY claimable_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE bench_bare_queue q
   SET claimable_at = now() + interval '60 seconds'
  FROM due
 WHERE q.queue = %(queue)s AND q.item_id = due.item_id
RETURNING q.item_id;

-- name: ack --
-- In: queue, item_ids[].
DELETE FROM bench_bare_queue WHERE queue = %(queue)s AND item_id = ANY(%(item_ids)s::text[]);

-- name: left --
-- In: queue. Out: the items still in it.
SELECT count(*) FROM bench_bare_queue WHERE queue = %(queue)s;
