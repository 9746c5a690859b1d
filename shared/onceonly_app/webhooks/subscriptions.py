"""Managing webhook subscriptions: disable, enable, delete (statements in
subscriptions.sql). Called by `onceonly subscriptions`, or by the app's own code.

- **disable**: no request is made to the subscription any more, but its events
  are kept: every delivery of it is held (deliveries.sql, record_held) at its
  next attempt, and new events keep being fanned out to it and held.
- **enable**: the held deliveries are released in event order, each with the
  whole retry schedule; those whose event is older than the retention end
  ``expired`` instead (visible, not sent).
- **delete**: a soft delete (``deleted_at``; the history stays). Every
  unfinished delivery ends ``dropped``: not a failure, never dead-lettered.

Each function takes the caller's connection and runs in one transaction on it
(a savepoint inside the caller's). Every function locks the subscription row
first, the order record_held locks in too, so none deadlocks an attempt."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from onceonly import Queue
from onceonly.stores.sqlfile import load_queries

SQL = load_queries(Path(__file__).with_suffix(".sql"))
HOLD_RETENTION = 7 * 24 * 3600.0  # seconds an event is kept for a disabled subscription
MAX_REASON_LENGTH = 200
RELEASE_SPACING = 0.001  # seconds between the due times of released deliveries: claimed in event order


class UnknownSubscriptionError(LookupError):
    """No subscription has that id."""


class SubscriptionDeletedError(ValueError):
    """The subscription was deleted; a deleted subscription cannot be changed."""


@dataclass(frozen=True)
class Enabled:
    released: list[str]  # delivery ids queued again, in event order
    expired: list[str]  # held longer than the retention: not sent


def disable(conn: psycopg.Connection[Any], subscription_id: str, reason: str) -> bool:
    """Stop attempting ``subscription_id``'s deliveries; they are held (kept) until
    :func:`enable`. False if it was disabled already (its reason is then
    replaced). Raises UnknownSubscriptionError, SubscriptionDeletedError, and
    ValueError for an empty or overlong ``reason``."""
    reason = _check_reason(reason)
    with conn.transaction():
        was_enabled = _lock(conn, subscription_id)
        conn.execute(SQL["set_enabled"], {"webhook_id": subscription_id, "enabled": False, "reason": reason})
    return was_enabled


def enable(conn: psycopg.Connection[Any], queue: Queue, subscription_id: str, *,
           retention: float = HOLD_RETENTION) -> Enabled:
    """Enable ``subscription_id`` and release its held deliveries into ``queue``
    (the retry workers' due queue), due now in event order; a held event older
    than ``retention`` seconds is expired instead. Idempotent: enabling an
    enabled subscription re-queues any released delivery a previous call left
    unqueued (it died between its commit and the queue). ``conn`` must be in
    autocommit mode: the release is committed before the queue sees it.
    Raises UnknownSubscriptionError, SubscriptionDeletedError, ValueError."""
    if not conn.autocommit:
        raise ValueError("enable() needs an autocommit connection: it commits before it queues")
    if not retention > 0:
        raise ValueError(f"retention must be > 0 seconds, got {retention}")
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        _lock(conn, subscription_id)
        params = {"webhook_id": subscription_id, "retention": retention}
        cur.execute(SQL["set_enabled"], {**params, "enabled": True, "reason": None})
        expired = [row["id"] for row in cur.execute(SQL["expire_held"], params)]
        cur.execute(SQL["release_held"], params)
        due = cur.execute(SQL["due_retrying"], params).fetchall()
    # Due times a millisecond apart: the queue hands them out oldest first, so
    # the events go out in the order they happened.
    start = time.time()
    queue.put_many((row["id"], start + n * RELEASE_SPACING, {"generation": row["generation"]})
                   for n, row in enumerate(due))
    return Enabled([row["id"] for row in due], expired)


def delete(conn: psycopg.Connection[Any], subscription_id: str) -> list[str]:
    """Soft-delete ``subscription_id``: it gets no new event and no request, and
    every unfinished delivery of it (queued, held, in flight) ends ``dropped``.
    Returns the dropped delivery ids. Raises UnknownSubscriptionError, and
    SubscriptionDeletedError if it was deleted already."""
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        _lock(conn, subscription_id)
        dropped = [row["id"] for row in cur.execute(SQL["drop_deliveries"], {"webhook_id": subscription_id})]
        cur.execute(SQL["mark_deleted"], {"webhook_id": subscription_id})
    return dropped


def _lock(conn: psycopg.Connection[Any], subscription_id: str) -> bool:
    """Lock the subscription's row; whether it is enabled."""
    if not isinstance(subscription_id, str) or not subscription_id.strip():
        raise ValueError("subscription id must be a non-empty string")
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(SQL["lock_subscription"], {"webhook_id": subscription_id}).fetchone()
    if row is None:
        raise UnknownSubscriptionError(f"unknown subscription {subscription_id!r}")
    if row["deleted"]:
        raise SubscriptionDeletedError(f"subscription {subscription_id!r} was deleted")
    return bool(row["enabled"])


def _check_reason(reason: str) -> str:
    text = reason.strip() if isinstance(reason, str) else ""
    if not text or len(text) > MAX_REASON_LENGTH:
        raise ValueError(f"reason must be 1-{MAX_REASON_LENGTH} characters")
    return text
