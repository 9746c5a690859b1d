"""The delivery records on the domain database (statements in deliveries.sql).

Functions taking a connection (the data-access rule of onceonly_app.db): each
is one statement; the service runs each in its own short transaction
(:func:`connection`), so no connection is held while a request is in flight.
The work of a batch (an SQS batch, a claimed batch) takes one statement for all
its deliveries: ``*_many`` functions, fenced row by row. A database that cannot
be reached raises StoreUnavailableError ("retry may help"), never a driver error."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from onceonly.errors import StoreUnavailableError
from onceonly_app.sql_queries import load_queries

from .endpoint_limits import DEFAULT_MAX_IN_FLIGHT, DEFAULT_RATE_PER_SECOND
from .messages import DeliveryRequest

SQL = load_queries(Path(__file__).with_suffix(".sql"))


def delivery_id_for(webhook_id: str, event_id: str) -> str:
    """The stable ``msg_…`` id of the delivery of ``event_id`` to ``webhook_id``:
    every replica computes the same one, and it is the ``webhook-id`` header of
    every attempt (the receiver's idempotency key)."""
    digest = hashlib.sha256(f"{webhook_id}\x1f{event_id}".encode()).hexdigest()
    return f"msg_{digest[:32]}"


@dataclass(frozen=True)
class Subscription:
    id: str
    tenant_id: str | None  # None: a subscription from before tenants, not assigned yet
    url: str
    secret: str  # the current signing secret
    enabled: bool
    previous_secrets: tuple[str, ...] = ()  # rotated out, still inside their overlap (newest first)
    deleted: bool = False  # soft-deleted (deleted_at): its deliveries end dropped
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT  # requests at once (endpoint_limits.py)
    rate_per_second: float = DEFAULT_RATE_PER_SECOND
    headers: Mapping[str, str] = field(default_factory=dict)  # its own, sent with every attempt
    failing_since: float | None = None  # epoch: its attempts have all failed since then (endpoint_health.py)

    @property
    def signing_secrets(self) -> tuple[str, ...]:
        """Every secret an attempt signs with: the current one first."""
        return (self.secret, *self.previous_secrets)


@dataclass(frozen=True)
class AttemptInput:
    """A delivery as an attempt needs it, from start_attempts."""

    id: str
    tenant_id: str | None  # the event's tenant
    event_type: str
    payload: Any
    attempt: int  # this attempt's number, counted before the request
    event_sequence: int | None
    occurred_at: float  # the change's time (the delivery's creation for older messages)
    subscription: Subscription
    event_id: str = ""  # the event's own id (a notice of this delivery names it)
    deferrals: int = 0  # times it was held back by its endpoint's limit (no attempt used)

    @property
    def webhook_id(self) -> str:
        return self.subscription.id

    def body(self) -> str:
        """The request body: the same bytes on every attempt (Standard Webhooks envelope,
        plus the event's sequence number when it has one)."""
        envelope: dict[str, Any] = {"type": self.event_type, "timestamp": _iso(self.occurred_at),
                                    "data": self.payload}
        if self.event_sequence is not None:
            envelope["sequence"] = self.event_sequence
        return json.dumps(envelope, separators=(",", ":"), sort_keys=True)


@dataclass(frozen=True)
class Outcome:
    """What one attempt's result does to the delivery."""

    outcome: str  # succeeded | failed | gone | refused | disabled | dropped | aborted (webhook_attempts.outcome)
    status: str  # the delivery's new status: succeeded | retrying | dead | held | dropped | aborted
    response_code: int | None
    error: str | None
    next_attempt_at: float | None  # epoch seconds, with status retrying


@dataclass(frozen=True)
class Created:
    """What create_many did with a batch."""

    known_webhooks: set[str]  # the batch's webhook_ids that name a subscription (a deleted one too)
    delivery_ids: set[str]  # the deliveries it created
    # (max_in_flight, rate_per_second) of the known subscriptions that are enabled and not deleted
    limits: dict[str, tuple[int, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Recorded:
    recorded: bool  # False: the fence refused it
    attempt: int | None
    status: str  # the status written (what the outcome asked for, or what record_held decided)
    next_attempt_at: float | None  # epoch seconds, with status retrying


@contextmanager
def connection(pool: ConnectionPool) -> Iterator[psycopg.Connection[Any]]:
    """A connection of ``pool`` for one short transaction (committed when the
    block ends, rolled back if it raises). A database that cannot be reached,
    then or during the block, raises StoreUnavailableError."""
    try:
        with pool.connection() as conn:
            yield conn
    except psycopg.OperationalError as exc:  # connection lost or refused, pool timeout, …
        raise StoreUnavailableError(f"domain database unavailable: {exc.__class__.__name__}") from exc


def _rows(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(SQL[name], params)
            return cur.fetchall() if cur.description else []
    except psycopg.OperationalError as exc:  # connection lost mid-statement, …
        raise StoreUnavailableError(f"domain database unavailable ({name}): "
                                    f"{exc.__class__.__name__}") from exc


def create(conn: psycopg.Connection[Any], request: DeliveryRequest) -> str | None:
    """Insert the delivery; its id, or None if (webhook_id, event_id) already had
    one or names no subscription."""
    delivery_id = delivery_id_for(request.webhook_id, request.event_id)
    return delivery_id if create_many(conn, [request]).delivery_ids else None


def create_many(conn: psycopg.Connection[Any], requests: Sequence[DeliveryRequest]) -> Created:
    """Insert the deliveries of ``requests`` whose subscription exists, in one
    statement. One that already existed, or is listed again, is not created."""
    if not requests:
        return Created(set(), set())
    rows = [{"id": delivery_id_for(r.webhook_id, r.event_id), "webhook_id": r.webhook_id,
             "tenant_id": r.tenant_id, "event_id": r.event_id, "event_type": r.event_type, "payload": r.payload,
             "occurred_at": r.occurred_at.isoformat() if r.occurred_at else None, "sequence": r.sequence}
            for r in requests]
    found = _rows(conn, "create_deliveries", {"rows": Jsonb(rows)})
    return Created({r["id"] for r in found if r["kind"] == "known"},
                   {r["id"] for r in found if r["kind"] == "created"},
                   {r["id"]: (r["max_in_flight"], float(r["rate_per_second"])) for r in found
                    if r["kind"] == "known" and r["sendable"]})


def untouched_since(conn: psycopg.Connection[Any], delivery_id: str) -> float | None:
    """When the delivery was created, if no attempt was recorded and no claim
    stamped it yet (its creator is mid-attempt or died); else None."""
    rows = _rows(conn, "untouched_delivery", {"id": delivery_id})
    return float(rows[0]["created_at"]) if rows else None


def start_attempts(conn: psycopg.Connection[Any], holders: Sequence[tuple[str, int, int]],
                   max_attempts: int) -> dict[str, AttemptInput]:
    """Count one more attempt for each ``(delivery_id, generation, token)``
    (distinct ids) and load what it needs, in one statement: the attempts of
    the holders that may make one. A holder fenced off, or whose every
    allowed attempt has started, is missing (see state())."""
    if not holders:
        return {}
    rows = _rows(conn, "start_attempts", {
        "rows": Jsonb([{"id": i, "generation": g, "token": t} for i, g, t in holders]),
        "max_attempts": max_attempts})
    return {row["id"]: _attempt_input(row) for row in rows}


def stamp_fences(conn: psycopg.Connection[Any], holders: Sequence[tuple[str, int, int]]) -> dict[str, str]:
    """Take the deliveries for their claims, ``(delivery_id, generation, token)``
    each (distinct ids), in one statement: the status each stamped one had
    before; a refused one is missing."""
    if not holders:
        return {}
    rows = _rows(conn, "stamp_fences", {
        "rows": Jsonb([{"id": i, "generation": g, "token": t} for i, g, t in holders])})
    return {row["id"]: str(row["previous_status"]) for row in rows}


def state(conn: psycopg.Connection[Any], delivery_id: str) -> dict[str, Any] | None:
    rows = _rows(conn, "delivery_state", {"id": delivery_id})
    return rows[0] if rows else None


def record_many(conn: psycopg.Connection[Any],
                outcomes: Sequence[tuple[str, int, int, Outcome, float]]) -> dict[str, Recorded]:
    """Record each ``(delivery_id, generation, token, outcome, started_at)``
    (distinct ids) in one statement, each fenced on its own (False: refused)."""
    if not outcomes:
        return {}
    rows = _rows(conn, "record_outcomes", {"rows": Jsonb([
        {"id": i, "generation": g, "token": t, "outcome": o.outcome, "status": o.status,
         "response_code": o.response_code, "error": o.error, "next_attempt_at": o.next_attempt_at,
         "started_at": started} for i, g, t, o, started in outcomes])})
    asked = {i: o for i, _, _, o, _ in outcomes}
    return {row["id"]: Recorded(bool(row["recorded"]), row["attempt"], asked[row["id"]].status,
                                asked[row["id"]].next_attempt_at) for row in rows}


def record_held(conn: psycopg.Connection[Any], delivery_id: str, generation: int, token: int, webhook_id: str,
                outcome: Outcome, started_at: float, gone_url: str | None = None,
                reason: str | None = None) -> Recorded:
    """Record an outcome that holds the delivery because its subscription is
    disabled; with ``gone_url`` (a 410 from that URL) also disable the
    subscription, if it still has that URL. The status written is decided
    under the subscription's lock: held, dropped (deleted) or retrying now
    (enabled meanwhile, or the 410 came from a URL it no longer has)."""
    rows = _rows(conn, "record_held", {
        "id": delivery_id, "generation": generation, "token": token, "webhook_id": webhook_id,
        "outcome": outcome.outcome, "response_code": outcome.response_code, "error": outcome.error,
        "started_at": started_at, "gone_url": gone_url, "reason": reason,
    })
    row = rows[0]
    if not row["recorded"]:
        return Recorded(False, None, outcome.status, None)
    return Recorded(True, row["attempt"], str(row["status"]), row["next_attempt_at"])


def defer(conn: psycopg.Connection[Any], delivery_id: str, generation: int, token: int, next_attempt_at: float,
          retention: float) -> Recorded:
    """Give back the attempt start_attempts counted, without a request (its
    endpoint is at its limit): the delivery is retrying, due at
    ``next_attempt_at``, or expired if its event is older than ``retention``
    seconds. Fenced like record()."""
    rows = _rows(conn, "defer_attempt", {"id": delivery_id, "generation": generation, "token": token,
                                        "next_attempt_at": next_attempt_at, "retention": retention})
    if not rows:
        return Recorded(False, None, "retrying", None)
    status = str(rows[0]["status"])
    return Recorded(True, rows[0]["attempts"], status, next_attempt_at if status == "retrying" else None)


def redrive_dead(conn: psycopg.Connection[Any], ids: list[str] | None, webhook_id: str | None,
                 limit: int) -> list[tuple[str, int]]:
    rows = _rows(conn, "redrive_dead", {"ids": ids, "webhook_id": webhook_id, "limit": limit})
    return [(row["id"], row["generation"]) for row in rows]


def retrying(conn: psycopg.Connection[Any], ids: list[str]) -> list[tuple[str, int]]:
    return [(row["id"], row["generation"]) for row in _rows(conn, "retrying_deliveries", {"ids": ids})]


def dead(conn: psycopg.Connection[Any], webhook_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    return _rows(conn, "dead_deliveries", {"webhook_id": webhook_id, "limit": limit})


def _attempt_input(row: dict[str, Any]) -> AttemptInput:
    subscription = Subscription(row.pop("webhook_id"), row.pop("subscription_tenant_id"), row.pop("url"),
                                row.pop("secret"), row.pop("enabled"), tuple(row.pop("previous_secrets")),
                                row.pop("deleted"), row.pop("max_in_flight"), row.pop("rate_per_second"),
                                row.pop("headers"), row.pop("failing_since"))
    return AttemptInput(subscription=subscription, **row)


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat().replace("+00:00", "Z")
