"""Send a subscription's deliveries again, by the time of their event (Svix's
`recover` and replay): `onceonly subscriptions recover|replay ID --since T`.

- **recover**: every delivery of the window that failed and is not being
  attempted: dead (out of attempts), expired (held past the retention),
  aborted (by the receiver), or retrying (failed, waiting for its next
  attempt: made due now). Never one that succeeded.
- **replay**: the same, and the succeeded ones too: explicitly sent again.

Every delivery keeps its id, so the receiver sees the same ``webhook-id`` and
can dedupe. Each one gets a new generation (the fence of a claim taken before
it), the whole retry schedule again, and a queue item due now, in event order.
The update commits before the queue sees the items; a run that dies in
between leaves them ``retrying`` without a queue item, and running it again
re-queues them (a run twice sends nothing twice: a delivery waiting to be sent
is only re-queued, under a newer generation). Held deliveries are left to
``enable``; a disabled subscription's recovered deliveries are held at their
next attempt. Each run is recorded in the subscription's audit."""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from onceonly import Queue
from onceonly_app.sql_queries import load_queries

from .subscriptions import APP_ACTOR, RELEASE_SPACING, _lock, _record

SQL = load_queries(Path(__file__).with_suffix(".sql"))
FAILED = ("dead", "expired", "aborted", "retrying")
REPLAYED = (*FAILED, "succeeded")


@dataclass(frozen=True)
class Requeued:
    delivery_ids: list[str]  # in event order
    previous: Counter[str] = field(default_factory=Counter)  # how many had each status before

    @property
    def count(self) -> int:
        return len(self.delivery_ids)

    @property
    def newly_sent(self) -> int:
        """Those that were not already waiting for an attempt (retrying)."""
        return self.count - self.previous["retrying"]


def recover(conn: psycopg.Connection[Any], queue: Queue, subscription_id: str, since: datetime | float,
            until: datetime | float | None = None, *, actor: str = APP_ACTOR) -> Requeued:
    """Re-queue ``subscription_id``'s failed deliveries whose event happened in
    [``since``, ``until``) (until: now). ``conn`` must be in autocommit mode.
    Raises UnknownSubscriptionError, SubscriptionDeletedError, ValueError."""
    return _requeue(conn, queue, subscription_id, since, until, FAILED, "recover", actor)


def replay(conn: psycopg.Connection[Any], queue: Queue, subscription_id: str, since: datetime | float,
           until: datetime | float | None = None, *, actor: str = APP_ACTOR) -> Requeued:
    """As :func:`recover`, and send the window's succeeded deliveries again too
    (under the same webhook-ids)."""
    return _requeue(conn, queue, subscription_id, since, until, REPLAYED, "replay", actor)


def _requeue(conn: psycopg.Connection[Any], queue: Queue, subscription_id: str, since: datetime | float,
             until: datetime | float | None, statuses: tuple[str, ...], action: str, actor: str) -> Requeued:
    if not conn.autocommit:
        raise ValueError(f"{action}() needs an autocommit connection: it commits before it queues")
    start, end = _epoch(since, "since"), time.time() if until is None else _epoch(until, "until")
    if not start < end:
        raise ValueError(f"since must be before until (and before now), got {start} and {end}")
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        _lock(conn, subscription_id)
        rows = cur.execute(SQL["requeue_window"], {"webhook_id": subscription_id, "since": start, "until": end,
                                                   "statuses": list(statuses)}).fetchall()
        rows.sort(key=lambda row: (row["event_time"], row["event_sequence"] or 0, row["id"]))
        previous = Counter(str(row["previous_status"]) for row in rows)
        _record(conn, subscription_id, action, actor, {"since": start, "until": end, "requeued": len(rows),
                                                       "previous": dict(previous)})
    # Due times a millisecond apart: the queue hands them out in event order.
    now = time.time()
    queue.put_many((row["id"], now + n * RELEASE_SPACING, {"generation": row["generation"]})
                   for n, row in enumerate(rows))
    return Requeued([row["id"] for row in rows], previous)


def _epoch(moment: datetime | float, name: str) -> float:
    if isinstance(moment, datetime):
        if moment.tzinfo is None:
            raise ValueError(f"{name} needs a time zone (e.g. 2026-12-01T09:00:00Z)")
        return moment.timestamp()
    if isinstance(moment, bool) or not isinstance(moment, int | float) or not math.isfinite(moment):
        raise ValueError(f"{name} must be a time, got {moment!r}")
    return float(moment)
