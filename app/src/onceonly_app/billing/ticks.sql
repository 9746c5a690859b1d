-- The per-tick fence (table job_ticks). A run stamps its lease token once at
-- start; every transaction that commits the job's effects first holds the row
-- with its own token. The stamp and the hold take conflicting row locks, so a
-- newer run's stamp and an older run's commit are ordered: either the old
-- commit lands before the stamp, or the old run finds the newer token and
-- rolls back.

-- name: stamp --
-- In: job, scheduled_time, token. Out: a row if this run now holds the fence,
-- none if a run with a higher (or equal) token stamped first.
INSERT INTO job_ticks AS t (job, scheduled_time, fence_token)
VALUES (%(job)s, %(scheduled_time)s, %(token)s)
ON CONFLICT (job, scheduled_time) DO UPDATE
   SET fence_token = EXCLUDED.fence_token, started_at = now(), finished_at = NULL, result = NULL
 WHERE t.fence_token < EXCLUDED.fence_token
RETURNING fence_token;

-- name: hold --
-- In: job, scheduled_time, token. Out: a row (locked until the transaction
-- ends) if the fence still carries this token; none if a newer run stamped.
SELECT fence_token FROM job_ticks
 WHERE job = %(job)s AND scheduled_time = %(scheduled_time)s AND fence_token = %(token)s
   FOR SHARE;

-- name: finish --
-- In: job, scheduled_time, token, result (json). Records the run's outcome.
UPDATE job_ticks SET finished_at = now(), result = %(result)s::jsonb
 WHERE job = %(job)s AND scheduled_time = %(scheduled_time)s AND fence_token = %(token)s
RETURNING fence_token;
