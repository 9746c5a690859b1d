-- The schema step's repair after a change of coordination store
-- (store_switch.py). Every statement runs in the migration's transaction,
-- after its advisory lock: two steps never repair at once.

-- name: recorded_identity --
-- Out: the store (and stack) the database was last set up for, locked until
-- the transaction ends; no row on a database set up before it was recorded.
SELECT store_kind, store_instance, store_location, stack FROM appdb_store_identity FOR UPDATE;

-- name: reset_cursor_fences --
-- The payment pollers' fences: the new store's first poller lease (token 1)
-- must pass them. Out: one row per poller reset.
UPDATE payment_cursors SET fence_token = 0, updated_at = now() WHERE fence_token <> 0 RETURNING poller;

-- name: reset_tick_fences --
-- The fences of ticks that never finished: the platform's retry of such a
-- tick runs on the new store with token 1. A finished tick keeps its fence, so
-- a late retry of it is still refused. Out: one row per tick reset.
UPDATE job_ticks SET fence_token = 0 WHERE finished_at IS NULL AND fence_token <> 0 RETURNING job;

-- name: requeue_deliveries --
-- In: lease (seconds: when a delivery someone may be attempting right now is
-- due again). Out: every delivery the old store held a queue item for (pending
-- and attempting: the dispatcher's safety net or a claim; retrying: its next
-- attempt), with its new generation and when it is due. A new generation and
-- token 0, as a redrive does: every claim of the old store (its payload names
-- the old generation) is refused by the fence, and the new store's claims
-- (token >= 1) pass it. attempts are kept: the schedule goes on where it was.
-- Rows locked in id order, like every statement that locks several deliveries: none deadlock.
WITH locked AS (
    SELECT id FROM webhook_deliveries WHERE status IN ('pending', 'attempting', 'retrying')
     ORDER BY id FOR NO KEY UPDATE
)
UPDATE webhook_deliveries d
   SET generation = d.generation + 1, fence_token = 0, updated_at = now()
  FROM locked
 WHERE d.id = locked.id AND d.status IN ('pending', 'attempting', 'retrying')
RETURNING d.id, d.generation,
          extract(epoch FROM CASE WHEN d.status = 'retrying' THEN coalesce(d.next_attempt_at, now())
                                  ELSE now() + make_interval(secs => %(lease)s) END)::float8 AS due_at;

-- name: record_identity --
-- In: kind, instance, location, stack (NULL: keep the recorded one).
INSERT INTO appdb_store_identity AS i (singleton, store_kind, store_instance, store_location, stack)
VALUES (true, %(kind)s, %(instance)s, %(location)s, %(stack)s)
ON CONFLICT (singleton) DO UPDATE
   SET store_kind = EXCLUDED.store_kind, store_instance = EXCLUDED.store_instance,
       store_location = EXCLUDED.store_location, stack = coalesce(EXCLUDED.stack, i.stack), recorded_at = now();

-- name: record_switch --
INSERT INTO appdb_store_switches (reason, from_kind, from_instance, to_kind, to_instance, stack, cursors_reset,
                                  ticks_reset, deliveries_requeued)
VALUES (%(reason)s, %(from_kind)s, %(from_instance)s, %(to_kind)s, %(to_instance)s, %(stack)s, %(cursors)s,
        %(ticks)s, %(deliveries)s);
