"""Re-drive dead deliveries: a new generation, the whole retry schedule again,
and a queue item due now. Called by `onceonly redrive`.

The database update comes first and the queue put second. If the process dies
in between, the delivery shows as ``retrying`` with no queue item (so each
function commits its update before it puts, and takes a connection that is not
inside a transaction of the caller's):
:func:`requeue_retrying` puts those ids back (harmless for ids that are queued)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from onceonly import Queue

from . import deliveries


@dataclass(frozen=True)
class Redriven:
    delivery_id: str
    generation: int


def redrive(conn: psycopg.Connection[Any], queue: Queue, *, delivery_ids: list[str] | None = None,
            webhook_id: str | None = None, limit: int = 100) -> list[Redriven]:
    """Re-queue up to ``limit`` dead deliveries (all, or only ``delivery_ids`` /
    those of ``webhook_id``). Returns what was re-driven. A subscription that was
    disabled stays disabled: its re-driven deliveries are held until it is enabled."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    with conn.transaction():  # committed before the queue put
        redriven = [Redriven(i, g) for i, g in deliveries.redrive_dead(conn, delivery_ids, webhook_id, limit)]
    _put_due_now(queue, redriven)
    return redriven


def requeue_retrying(conn: psycopg.Connection[Any], queue: Queue, delivery_ids: list[str]) -> list[Redriven]:
    """Make the listed ``retrying`` deliveries due now. A waiting queue item is only
    rescheduled; a missing one (a redrive that died half-way) is created again."""
    with conn.transaction():
        requeued = [Redriven(i, g) for i, g in deliveries.retrying(conn, delivery_ids)]
    _put_due_now(queue, requeued)
    return requeued


def _put_due_now(queue: Queue, items: list[Redriven]) -> None:
    # One round trip per batch. The generation in the payload is what the
    # claim stamps and fences with.
    queue.put_many((item.delivery_id, None, {"generation": item.generation}) for item in items)


def list_dead(conn: psycopg.Connection[Any], *, webhook_id: str | None = None, limit: int = 100) -> list[dict]:
    """Dead deliveries, oldest first, for `onceonly redrive --list`."""
    return deliveries.dead(conn, webhook_id, limit)
