"""`onceonly status`: the retry queue's depth, dead letters, the last tick of
each scheduled job and the lease behind it (owner, token, held or completed),
and the job-wide poller leases with the cursor each one fences."""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime

import psycopg
from rich.console import Console
from rich.table import Table

import onceonly
from onceonly.scheduled import tick_lock_name
from onceonly_app.billing.payment_watcher import poller_lease_name

from .errors import CliError
from .ops import Ops, missing_tables, open_ops

DEAD_SHOWN = 20
# The last tick per job, from the jobs' own fence records.
LAST_TICKS = """
SELECT DISTINCT ON (job) job, scheduled_time, fence_token, started_at, finished_at
  FROM job_ticks ORDER BY job, scheduled_time DESC"""
DEAD_COUNT = "SELECT count(*) FROM webhook_deliveries WHERE status = 'dead'"
# Jobs with a job-wide poller lease (the payment watcher), from their cursors.
POLLER_JOBS = "SELECT poller, cursor, fence_token FROM payment_cursors ORDER BY poller"


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _lease_state(store: onceonly.Store, name: str) -> tuple[str, str, str]:
    state = store.inspect(name)
    if state is None:
        return "-", "-", "never granted"
    if state.completed:
        return state.owner or "-", str(state.token), f"completed (kept until {_when(state.busy_until)})"
    if state.busy_until > time.time():
        return state.owner or "-", str(state.token), f"HELD until {_when(state.busy_until)}"
    return state.owner or "-", str(state.token), "free (lease expired or released)"


def render(ops: Ops, console: Console) -> None:
    from onceonly_app.webhooks.deliveries import DeliveryRepository

    depth = ops.store.queue(ops.queue_name).depth()
    queue = Table(title=f"due queue {ops.queue_name!r}", title_justify="left")
    for column in ("due now", "scheduled", "in flight", "total"):
        queue.add_column(column, justify="right")
    queue.add_row(str(depth.due), str(depth.scheduled), str(depth.in_flight), str(depth.total))
    console.print(queue)

    with ops.pool.connection() as conn:
        dead_total = conn.execute(DEAD_COUNT).fetchone()[0]
        ticks = conn.execute(LAST_TICKS).fetchall()
        pollers = conn.execute(POLLER_JOBS).fetchall()
    dead = Table(title=f"dead-lettered deliveries: {dead_total} (re-drive: onceonly redrive --all)",
                 title_justify="left")
    for column in ("delivery (webhook-id)", "webhook", "event", "attempts", "last error", "dead since"):
        dead.add_column(column)
    for row in DeliveryRepository(ops.pool).dead(limit=DEAD_SHOWN):
        dead.add_row(row["id"], row["webhook_id"], row["event_id"], str(row["attempts"]),
                     (row["last_error"] or "")[:40], _when(row["dead_since"]))
    console.print(dead)

    jobs = Table(title="scheduled jobs: last tick and its lease", title_justify="left")
    for column in ("job", "last tick", "finished", "lease owner", "token", "lease"):
        jobs.add_column(column)
    for job, scheduled, _fence, _started, finished in ticks:
        owner, token, state = _lease_state(ops.store, tick_lock_name(job, scheduled))
        jobs.add_row(job, scheduled.strftime("%Y-%m-%d %H:%M:%SZ"),
                     finished.strftime("%H:%M:%SZ") if finished else "not finished", owner, token, state)
    console.print(jobs)

    leases = Table(title="job-wide poller leases (one active poller per job)", title_justify="left")
    for column in ("lease", "owner", "token", "state", "cursor", "cursor fenced by token"):
        leases.add_column(column)
    for job, cursor, fence in pollers:
        name = poller_lease_name(job)
        owner, token, state = _lease_state(ops.store, name)
        leases.add_row(name, owner, token, state, cursor or "-", str(fence))
    console.print(leases)


def status_command(args: argparse.Namespace) -> int:
    with open_ops(args.database, args.store) as ops:
        try:
            render(ops, Console())
        except psycopg.errors.UndefinedTable as exc:
            raise missing_tables(exc) from None
        except psycopg.Error as exc:
            raise CliError(f"database error: {str(exc).splitlines()[0]}") from None
        except onceonly.OnceOnlyError as exc:
            raise CliError(f"store error: {str(exc).splitlines()[0]}") from None
    return 0
