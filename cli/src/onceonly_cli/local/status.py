"""`onceonly status`: the retry queue's depth, dead letters, each webhook
subscription's health, the last tick of each scheduled job and the lease behind
it (owner, token, held or completed), and the job-wide poller leases with the
cursor each one fences."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from rich.console import Console
from rich.table import Table

import onceonly
from onceonly.scheduled import tick_lock_name
from onceonly_app.billing.payment_watcher import poller_lease_name

from ..errors import CliError
from .ops import Ops, missing_tables, open_ops

DEAD_SHOWN = 20
# The last tick per job, from the jobs' own fence records.
LAST_TICKS = """
SELECT DISTINCT ON (job) job, scheduled_time, fence_token, started_at, finished_at
  FROM job_ticks ORDER BY job, scheduled_time DESC"""
DEAD_COUNT = "SELECT count(*) FROM webhook_deliveries WHERE status = 'dead'"
# Per subscription not deleted: its recorded attempts' success over the last
# hour and day, its last error, and its deliveries by the states an operator acts on.
SUBSCRIPTION_HEALTH = """
SELECT s.id, s.tenant_id, s.enabled, s.disabled_reason, s.max_in_flight, s.rate_per_second,
       d.pending, d.retrying, d.dead, d.held, d.aborted, a.hour_total, a.hour_ok, a.day_total, a.day_ok,
       e.error AS last_error, e.finished_at AS last_error_at
  FROM webhook_subscriptions s
  CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE status IN ('pending', 'attempting')) AS pending,
               count(*) FILTER (WHERE status = 'retrying') AS retrying,
               count(*) FILTER (WHERE status = 'dead') AS dead,
               count(*) FILTER (WHERE status = 'held') AS held,
               count(*) FILTER (WHERE status = 'aborted') AS aborted
          FROM webhook_deliveries WHERE webhook_id = s.id) d
  CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE t.started_at > now() - interval '1 hour') AS hour_total,
               count(*) FILTER (WHERE t.started_at > now() - interval '1 hour' AND t.outcome = 'succeeded') AS hour_ok,
               count(*) AS day_total, count(*) FILTER (WHERE t.outcome = 'succeeded') AS day_ok
          FROM webhook_attempts t JOIN webhook_deliveries dd ON dd.id = t.delivery_id
         WHERE dd.webhook_id = s.id AND t.recorded AND t.started_at > now() - interval '1 day') a
  LEFT JOIN LATERAL (
        SELECT t.error, t.finished_at
          FROM webhook_attempts t JOIN webhook_deliveries dd ON dd.id = t.delivery_id
         WHERE dd.webhook_id = s.id AND t.error IS NOT NULL
         ORDER BY t.id DESC LIMIT 1) e ON true
 WHERE s.deleted_at IS NULL
 ORDER BY s.tenant_id, s.id"""
# Jobs with a job-wide poller lease (the payment watcher), from their cursors.
POLLER_JOBS = "SELECT poller, cursor, fence_token FROM payment_cursors ORDER BY poller"


def _iso(moment: datetime | float | None) -> str | None:
    """A datetime or epoch seconds as ``YYYY-MM-DDTHH:MM:SSZ``."""
    if moment is None:
        return None
    if not isinstance(moment, datetime):
        moment = datetime.fromtimestamp(moment, tz=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _lease(store: onceonly.Store, name: str) -> dict[str, Any]:
    """The lease record of ``name``: state is held, completed, free or absent (never
    granted, or a tick record that expired after its keep)."""
    state = store.inspect(name)
    if state is None:
        return {"name": name, "state": "absent", "owner": None, "token": None, "until": None}
    if state.completed:
        kind = "completed"
    elif state.busy_until > time.time():
        kind = "held"
    else:
        kind = "free"
    return {"name": name, "state": kind, "owner": state.owner, "token": state.token,
            "until": _iso(state.busy_until)}


def _rate(ok: int, total: int) -> float | None:
    """The share of attempts that succeeded; None without attempts."""
    return round(ok / total, 4) if total else None


def _subscription_health(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["id"], "tenant": row["tenant_id"], "enabled": row["enabled"],
            "disabled_reason": row["disabled_reason"],
            "limits": {"max_in_flight": row["max_in_flight"], "rate_per_second": row["rate_per_second"]},
            "success_rate": {"hour": _rate(row["hour_ok"], row["hour_total"]),
                             "day": _rate(row["day_ok"], row["day_total"])},
            "attempts": {"hour": row["hour_total"], "day": row["day_total"]},
            "last_error": row["last_error"], "last_error_at": _iso(row["last_error_at"]),
            "deliveries": {name: row[name] for name in ("pending", "retrying", "dead", "held", "aborted")}}


def collect(ops: Ops) -> dict[str, Any]:
    """Everything status shows, as plain JSON-able data (what --json prints)."""
    from onceonly_app.webhooks import deliveries

    depth = ops.store.queue(ops.queue_name).depth()
    with ops.pool.connection() as conn:
        dead_total = conn.execute(DEAD_COUNT).fetchone()[0]
        ticks = conn.execute(LAST_TICKS).fetchall()
        pollers = conn.execute(POLLER_JOBS).fetchall()
        with conn.cursor(row_factory=dict_row) as cur:
            health = [_subscription_health(row) for row in cur.execute(SUBSCRIPTION_HEALTH)]
        shown = deliveries.dead(conn, limit=DEAD_SHOWN)
    dead = [{"delivery": row["id"], "webhook": row["webhook_id"], "event": row["event_id"],
             "attempts": row["attempts"], "last_error": row["last_error"],
             "dead_since": _iso(row["dead_since"])}
            for row in shown]
    return {
        "queue": {"name": ops.queue_name, "due": depth.due, "scheduled": depth.scheduled,
                  "in_flight": depth.in_flight, "total": depth.total},
        "dead_letters": {"total": dead_total, "shown": dead},
        "subscriptions": health,
        "jobs": [{"job": job, "last_tick": _iso(scheduled), "finished": _iso(finished),
                  "lease": _lease(ops.store, tick_lock_name(job, scheduled))}
                 for job, scheduled, _fence, _started, finished in ticks],
        "pollers": [{"job": job, "cursor": cursor, "cursor_fence_token": fence,
                     "lease": _lease(ops.store, poller_lease_name(job))} for job, cursor, fence in pollers],
    }


def _lease_cells(lease: dict[str, Any]) -> tuple[str, str, str]:
    until = (lease["until"] or "").replace("T", " ")
    state = {"absent": "no record (never granted, or expired after its keep)",
             "completed": f"completed (kept until {until})", "held": f"HELD until {until}",
             "free": "free (lease expired or released)"}[lease["state"]]
    return lease["owner"] or "-", "-" if lease["token"] is None else str(lease["token"]), state


def _percent(rate: float | None, attempts: int) -> str:
    return "-" if rate is None else f"{rate:.0%} of {attempts}"


def render(status: dict[str, Any], console: Console) -> None:
    q = status["queue"]
    queue = Table(title=f"due queue {q['name']!r}", title_justify="left")
    for column in ("due now", "scheduled", "in flight", "total"):
        queue.add_column(column, justify="right")
    queue.add_row(str(q["due"]), str(q["scheduled"]), str(q["in_flight"]), str(q["total"]))
    console.print(queue)

    dead = Table(title=f"dead-lettered deliveries: {status['dead_letters']['total']} "
                       "(re-drive: onceonly redrive --all)", title_justify="left")
    for column in ("delivery (webhook-id)", "webhook", "event", "attempts", "last error", "dead since"):
        dead.add_column(column)
    for row in status["dead_letters"]["shown"]:
        dead.add_row(row["delivery"], row["webhook"], row["event"], str(row["attempts"]),
                     (row["last_error"] or "")[:40], (row["dead_since"] or "-").replace("T", " "))
    console.print(dead)

    subscriptions = Table(title="webhook subscriptions: health (success = attempts that succeeded)",
                          title_justify="left")
    for column in ("subscription", "tenant", "state", "success 1 h", "success 24 h", "pending", "retrying",
                   "dead", "held", "aborted", "last error"):
        subscriptions.add_column(column)
    for sub in status["subscriptions"]:
        state = "enabled" if sub["enabled"] else f"DISABLED: {sub['disabled_reason']}"
        subscriptions.add_row(sub["id"], sub["tenant"] or "-", state,
                              *(_percent(sub["success_rate"][w], sub["attempts"][w]) for w in ("hour", "day")),
                              *(str(sub["deliveries"][k]) for k in ("pending", "retrying", "dead", "held", "aborted")),
                              (sub["last_error"] or "-")[:40])
    console.print(subscriptions)

    jobs = Table(title="scheduled jobs: last tick and its lease", title_justify="left")
    for column in ("job", "last tick", "finished", "lease owner", "token", "lease"):
        jobs.add_column(column)
    for job in status["jobs"]:
        finished = job["finished"][11:] if job["finished"] else "not finished"
        jobs.add_row(job["job"], job["last_tick"].replace("T", " "), finished, *_lease_cells(job["lease"]))
    console.print(jobs)

    leases = Table(title="job-wide poller leases (one active poller per job)", title_justify="left")
    for column in ("lease", "owner", "token", "state", "cursor", "cursor fenced by token"):
        leases.add_column(column)
    for poller in status["pollers"]:
        leases.add_row(poller["lease"]["name"], *_lease_cells(poller["lease"]), poller["cursor"] or "-",
                       str(poller["cursor_fence_token"]))
    console.print(leases)


def show_status(database: str | None, store: str | None, *, as_json: bool = False) -> int:
    """Print the status of ``database`` and ``store`` (None: the defaults of
    ops.existing_targets) as tables, or as JSON for scripts."""
    with open_ops(database, store) as ops:
        try:
            status = collect(ops)
        except psycopg.errors.UndefinedTable as exc:
            raise missing_tables(exc) from None
        except psycopg.Error as exc:
            raise CliError(f"database error: {str(exc).splitlines()[0]}") from None
        except onceonly.OnceOnlyError as exc:
            raise CliError(f"store error: {str(exc).splitlines()[0]}") from None
    if as_json:
        print(json.dumps(status, indent=2, sort_keys=True))
    else:
        render(status, Console())
    return 0
