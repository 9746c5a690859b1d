"""A subscription's attempt history (`onceonly subscriptions attempts`): for
each attempt its time, outcome, response code, latency and error, to answer
"did you send it, and what did we answer?". Bounded like the rest of the
history an operator acts on: attempts of the last HOLD_RETENTION (7 days) and at
most ``limit`` rows, newest first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from onceonly_app.sql_queries import load_queries

from .subscriptions import HOLD_RETENTION, UnknownSubscriptionError, show

SQL = load_queries(Path(__file__).with_suffix(".sql"))
DEFAULT_LIMIT = 50
MAX_LIMIT = 1000


class UnknownDeliveryError(LookupError):
    """The subscription has no delivery with that id."""


def attempt_history(conn: psycopg.Connection[Any], subscription_id: str, *, delivery_id: str | None = None,
                    limit: int = DEFAULT_LIMIT, retention: float = HOLD_RETENTION) -> list[dict[str, Any]]:
    """The newest attempts of ``subscription_id`` (only ``delivery_id``'s, if
    given), at most ``limit``, none older than ``retention`` seconds. Raises
    UnknownSubscriptionError, UnknownDeliveryError, ValueError."""
    if not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be a whole number 1-{MAX_LIMIT}")
    if not retention > 0:
        raise ValueError(f"retention must be > 0 seconds, got {retention}")
    show(conn, subscription_id)  # UnknownSubscriptionError for an id that names nothing (deleted ones too)
    params = {"webhook_id": subscription_id, "delivery_id": delivery_id, "retention": retention, "limit": limit}
    with conn.cursor(row_factory=dict_row) as cur:
        if delivery_id is not None and cur.execute(SQL["delivery_of"], params).fetchone() is None:
            raise UnknownDeliveryError(f"subscription {subscription_id!r} has no delivery {delivery_id!r}")
        return cur.execute(SQL["attempt_history"], params).fetchall()


__all__ = ["UnknownDeliveryError", "UnknownSubscriptionError", "attempt_history"]
