"""Managing webhook subscriptions: add, list, show, update (URL, event-type
filter), rotate-secret, disable, enable, delete (statements in
subscriptions.sql). Called by `onceonly subscriptions`, or by the app's own code.

- **add**: a subscription of a tenant billing knows, to a URL the SSRF guard
  passes now (it checks again at every attempt), for the event types named
  (or all); its ``whsec_`` secret is returned once and never shown again.
- **update**: a new URL (checked the same way) or filter; a filter applies to
  the events fanned out after it commits.

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
first, the order record_held locks in too, so none deadlocks an attempt.
Every change is recorded in webhook_subscription_audit, in its transaction:
who (``actor``), when and what (never a secret)."""

from __future__ import annotations

import json
import math
import re
import secrets
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from onceonly import Queue
from onceonly_app.events.types import EVENT_TYPES
from onceonly_app.sql_queries import load_queries

from . import deliveries, endpoint_settings
from .endpoint_health import OPERATIONAL_EVENT_TYPES
from .endpoint_limits import DEFAULT_MAX_IN_FLIGHT, DEFAULT_RATE_PER_SECOND, MIN_RATE
from .signing import new_secret
from .ssrf import Resolver, UnresolvableHostError, UnsafeTargetError, check_target
from .urls import UnencodableURLError, encoded_url

SQL = load_queries(Path(__file__).with_suffix(".sql"))
APP_ACTOR = "onceonly-app"  # the actor of a change the app's own code makes
AUDIT_SHOWN = 20
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")  # a subscription or tenant id
MAX_URL_LENGTH = 2048
MAX_IN_FLIGHT = 1000  # the limits' bounds (the table's CHECKs say the same)
MAX_RATE = 10000.0
HOLD_RETENTION = 7 * 24 * 3600.0  # seconds an event is kept for a disabled subscription
MAX_REASON_LENGTH = 200
RELEASE_SPACING = 0.001  # seconds between the due times of released deliveries: claimed in event order
# A rotated-out secret keeps signing this long (Svix keeps an old secret 24 hours),
# so a receiver can switch to the new secret at any moment of that window.
DEFAULT_OVERLAP = 24 * 3600.0
MAX_PREVIOUS = 4  # a header carries at most 5 signatures, however often secrets rotate


class UnknownSubscriptionError(LookupError):
    """No subscription has that id."""


class SubscriptionDeletedError(ValueError):
    """The subscription was deleted; a deleted subscription cannot be changed."""


class InvalidSubscriptionError(ValueError):
    """A change was refused before anything was written: an unknown tenant or
    event type, a URL the SSRF guard refuses, a malformed or taken id."""


@dataclass(frozen=True)
class Added:
    id: str
    secret: str  # the whsec_ signing secret: shown once, to configure the receiver


@dataclass(frozen=True)
class Enabled:
    released: list[str]  # delivery ids this call queued, in event order (none if all were queued already)
    expired: list[str]  # held longer than the retention: not sent


def add(conn: psycopg.Connection[Any], tenant_id: str, url: str, event_types: Iterable[str] | None = None, *,
        actor: str = APP_ACTOR, subscription_id: str | None = None,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT, rate_per_second: float = DEFAULT_RATE_PER_SECOND,
        new_tenant: bool = False, allow_http_hosts: Collection[str] = (),
        resolver: Resolver | None = None, secret: str | None = None, headers: Mapping[str, str] | None = None,
        description: str | None = None, metadata: Mapping[str, Any] | None = None) -> Added:
    """Subscribe ``url`` to ``tenant_id``'s events of ``event_types`` (None: every
    type), at most ``max_in_flight`` requests at once and ``rate_per_second``,
    and return its id (``subscription_id``, or a fresh ``wh_…``) and new
    secret. ``allow_http_hosts`` and ``resolver`` are the sender's
    (WebhookConfig): the URL must pass the same SSRF guard as at send time.
    ``new_tenant``: register the tenant with billing's defaults first, if
    billing does not know it (a fresh deployment). ``secret``: a ``whsec_``
    secret to sign with instead of a fresh one (one migrated from another
    sender); ``headers``, ``description``, ``metadata``: its own settings
    (endpoint_settings.py). Raises InvalidSubscriptionError; nothing is written then."""
    if subscription_id is None:
        subscription_id = f"wh_{secrets.token_hex(8)}"
    webhook_id = _check_id("subscription id", subscription_id)
    tenant_id = _check_id("tenant id", tenant_id)
    url = check_url(url, allow_http_hosts, resolver)
    types = check_event_types(event_types)
    limits = check_limits(max_in_flight, rate_per_second)
    settings = _checked_settings(headers, description, metadata)
    supplied = secret is not None
    secret = _checked(endpoint_settings.check_secret, secret) if supplied else new_secret()
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        if new_tenant:
            cur.execute(SQL["register_tenant"], {"tenant_id": tenant_id})
        known = cur.execute(SQL["tenant_known"], {"tenant_id": tenant_id}).fetchone()
        if not (known and known["known"]):
            raise InvalidSubscriptionError(f"unknown tenant {tenant_id!r}: billing has no settings, invoices, "
                                           "schedules or receiving accounts for it (--new-tenant registers it)")
        created = cur.execute(SQL["insert_subscription"], {"webhook_id": webhook_id, "tenant_id": tenant_id,
                                                           "url": url, "secret": secret,
                                                           "event_types": types, **limits}).fetchone()
        if created is None:
            raise InvalidSubscriptionError(f"subscription id {webhook_id!r} is taken")
        configured = endpoint_settings.write(conn, webhook_id, **settings)
        _record(conn, webhook_id, "add", actor, {"tenant_id": tenant_id, "url": url, "event_types": types,
                                                 **limits, **({"new_tenant": True} if new_tenant else {}),
                                                 **({"secret_supplied": True} if supplied else {}),
                                                 **{name: c["to"] for name, c in configured.items()}})
    return Added(webhook_id, secret)


def update(conn: psycopg.Connection[Any], subscription_id: str, *, url: str | None = None,
           event_types: Iterable[str] | None = None, all_event_types: bool = False,
           max_in_flight: int | None = None, rate_per_second: float | None = None, actor: str = APP_ACTOR,
           allow_http_hosts: Collection[str] = (), resolver: Resolver | None = None) -> dict[str, Any]:
    """Give ``subscription_id`` a new ``url``, filter (``event_types``, or
    ``all_event_types``) and/or limits; returns the changed fields, old and new. A filter
    applies to the events fanned out after this commits. An update that changes
    nothing writes nothing (no audit row) and returns {}. Raises
    InvalidSubscriptionError, UnknownSubscriptionError, SubscriptionDeletedError."""
    if event_types is not None and all_event_types:
        raise InvalidSubscriptionError("name event types or all of them, not both")
    set_types = event_types is not None or all_event_types
    if url is None and not set_types and max_in_flight is None and rate_per_second is None:
        raise InvalidSubscriptionError("nothing to change: give a URL, event types or limits")
    url = None if url is None else check_url(url, allow_http_hosts, resolver)
    types = None if all_event_types else check_event_types(event_types)
    limits = check_limits(max_in_flight, rate_per_second)
    with conn.transaction():
        _lock(conn, subscription_id)
        before = show(conn, subscription_id)
        wanted = {"url": url, **limits, **({"event_types": types} if set_types else {})}
        changed = {name: {"from": before[name], "to": value} for name, value in wanted.items()
                   if (value is not None or name == "event_types") and value != before[name]}
        if not changed:
            return changed  # the stored row is what was asked for: nothing written, no audit row
        conn.execute(SQL["update_subscription"], {"webhook_id": subscription_id, "url": url,
                                                  "event_types": types, "set_event_types": set_types, **limits})
        _record(conn, subscription_id, "update", actor, changed)
    return changed


def rotate_secret(conn: psycopg.Connection[Any], subscription_id: str, *,
                  overlap: float = DEFAULT_OVERLAP, actor: str = APP_ACTOR,
                  secret: str | None = None) -> str:
    """A new signing secret for ``subscription_id`` (``secret``, a supplied
    ``whsec_`` one, or a fresh one; returned once); the replaced one keeps
    signing beside it for ``overlap`` seconds (docs/security.md). One
    rotation is one row update under the row's lock: two at once take turns,
    and the second keeps the first one's secret.
    Raises UnknownSubscriptionError, SubscriptionDeletedError, ValueError."""
    if not overlap >= 0:
        raise ValueError(f"overlap must be >= 0 seconds, got {overlap}")
    supplied = secret is not None
    secret = _checked(endpoint_settings.check_secret, secret) if supplied else new_secret()
    with conn.transaction():
        _lock(conn, subscription_id)
        conn.execute(deliveries.SQL["rotate_secret"], {"webhook_id": subscription_id, "secret": secret,
                                                       "overlap": overlap, "keep": MAX_PREVIOUS})
        _record(conn, subscription_id, "rotate-secret", actor,
                {"overlap": overlap, **({"secret_supplied": True} if supplied else {})})
    return secret


def list_all(conn: psycopg.Connection[Any], tenant_id: str | None = None, *,
             include_deleted: bool = False) -> list[dict[str, Any]]:
    """The subscriptions (of ``tenant_id``, or all), oldest first; never a secret."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(SQL["list_subscriptions"], {"tenant_id": tenant_id,
                                                       "include_deleted": include_deleted}).fetchall()


def show(conn: psycopg.Connection[Any], subscription_id: str) -> dict[str, Any]:
    """One subscription (never a secret), its deliveries by status and its latest
    recorded changes. Raises UnknownSubscriptionError."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(SQL["show_subscription"], {"webhook_id": subscription_id}).fetchone()
        if row is None:
            raise UnknownSubscriptionError(f"unknown subscription {subscription_id!r}")
        row["changes"] = cur.execute(SQL["audit_log"], {"webhook_id": subscription_id,
                                                        "limit": AUDIT_SHOWN}).fetchall()
    return row


def check_url(url: str, allow_http_hosts: Collection[str] = (), resolver: Resolver | None = None) -> str:
    """``url`` as it is stored and sent (urls.py: IDNA host, percent-encoded
    path and query) if the SSRF guard passes it now (resolving its host once,
    as an attempt does); else InvalidSubscriptionError, before any connection."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidSubscriptionError(f"the URL must be 1-{MAX_URL_LENGTH} characters")
    try:
        encoded = encoded_url(url.strip())
    except UnencodableURLError as exc:
        raise InvalidSubscriptionError(f"URL refused: {exc}") from None
    if len(encoded) > MAX_URL_LENGTH:
        raise InvalidSubscriptionError(f"the URL must be 1-{MAX_URL_LENGTH} characters (once encoded)")
    try:
        check_target(encoded, allow_http_hosts, resolver)
    except (UnsafeTargetError, UnresolvableHostError) as exc:
        raise InvalidSubscriptionError(f"URL refused: {exc}") from None
    return encoded


def check_limits(max_in_flight: int | None, rate_per_second: float | None) -> dict[str, Any]:
    """The limits as stored (None: not given). Raises InvalidSubscriptionError."""
    if max_in_flight is not None and not (isinstance(max_in_flight, int) and 1 <= max_in_flight <= MAX_IN_FLIGHT):
        raise InvalidSubscriptionError(f"max in flight must be a whole number 1-{MAX_IN_FLIGHT}")
    if rate_per_second is not None and not (math.isfinite(rate_per_second) and MIN_RATE <= rate_per_second <= MAX_RATE):
        raise InvalidSubscriptionError(f"rate must be from {MIN_RATE:.4g} (one request a minute) to {MAX_RATE:g} "
                                       "requests per second")
    return {"max_in_flight": max_in_flight,
            "rate_per_second": None if rate_per_second is None else float(rate_per_second)}


def check_event_types(event_types: Iterable[str] | None) -> list[str] | None:
    """The filter as stored: None (every type) or the known types named, sorted.
    Raises InvalidSubscriptionError for an unknown type or an empty list."""
    if event_types is None:
        return None
    types = sorted({str(t).strip() for t in event_types})
    if not types:
        raise InvalidSubscriptionError("name at least one event type (or none for all)")
    # The operational types are only sent to the subscriptions that name them (endpoint_health.py).
    known = (*EVENT_TYPES, *OPERATIONAL_EVENT_TYPES)
    unknown = [t for t in types if t not in known]
    if unknown:
        raise InvalidSubscriptionError(f"unknown event type(s) {', '.join(map(repr, unknown))}; "
                                       f"known: {', '.join(known)}")
    return types


def disable(conn: psycopg.Connection[Any], subscription_id: str, reason: str, *, actor: str = APP_ACTOR) -> bool:
    """Stop attempting ``subscription_id``'s deliveries; they are held (kept) until
    :func:`enable`. False if it was disabled already (its reason is then
    replaced). Raises UnknownSubscriptionError, SubscriptionDeletedError, and
    ValueError for an empty or overlong ``reason``."""
    reason = _check_reason(reason)
    with conn.transaction():
        was_enabled = _lock(conn, subscription_id)
        conn.execute(SQL["set_enabled"], {"webhook_id": subscription_id, "enabled": False, "reason": reason})
        _record(conn, subscription_id, "disable", actor, {"reason": reason, "was_enabled": was_enabled})
    return was_enabled


def enable(conn: psycopg.Connection[Any], queue: Queue, subscription_id: str, *,
           retention: float = HOLD_RETENTION, actor: str = APP_ACTOR) -> Enabled:
    """Enable ``subscription_id`` and release its held deliveries into ``queue``
    (the retry workers' due queue), due now in event order; a held event older
    than ``retention`` seconds is expired instead. Idempotent, and safe to run
    twice at once: it queues with put_if_absent, so a delivery that already
    has a queue item (a worker may hold it, mid-attempt) is never rescheduled
    or handed to a second worker; what a previous call released but left
    unqueued (it died between its commit and the queue) is queued now.
    ``conn`` must be in autocommit mode: the release is committed before the
    queue sees it. Raises UnknownSubscriptionError, SubscriptionDeletedError,
    ValueError."""
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
        _record(conn, subscription_id, "enable", actor, {"released": len(due), "expired": len(expired)})
    # Due times a millisecond apart: the queue hands them out oldest first, so
    # the events go out in the order they happened.
    start = time.time()
    put = queue.put_if_absent([(row["id"], start + n * RELEASE_SPACING, {"generation": row["generation"]})
                               for n, row in enumerate(due)])
    return Enabled([row["id"] for row, queued in zip(due, put, strict=True) if queued], expired)


def delete(conn: psycopg.Connection[Any], subscription_id: str, *, actor: str = APP_ACTOR) -> list[str]:
    """Soft-delete ``subscription_id``: it gets no new event and no request, and
    every unfinished delivery of it (queued, held, in flight) ends ``dropped``.
    Returns the dropped delivery ids. Raises UnknownSubscriptionError, and
    SubscriptionDeletedError if it was deleted already."""
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        _lock(conn, subscription_id)
        dropped = [row["id"] for row in cur.execute(SQL["drop_deliveries"], {"webhook_id": subscription_id})]
        cur.execute(SQL["mark_deleted"], {"webhook_id": subscription_id})
        _record(conn, subscription_id, "delete", actor, {"dropped": len(dropped)})
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


def _record(conn: psycopg.Connection[Any], subscription_id: str, action: str, actor: str,
            detail: dict[str, Any]) -> None:
    """One audit row, in the transaction of the change it records."""
    conn.execute(SQL["record_change"], {"webhook_id": subscription_id, "action": action,
                                        "actor": _check_actor(actor), "detail": json.dumps(detail)})


def _check_actor(actor: str) -> str:
    text = actor.strip() if isinstance(actor, str) else ""
    if not text or len(text) > MAX_REASON_LENGTH:
        raise InvalidSubscriptionError(f"actor must be 1-{MAX_REASON_LENGTH} characters")
    return text


def _check_id(what: str, value: str) -> str:
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        raise InvalidSubscriptionError(f"{what} {value!r} must be 1-128 letters, digits and . _ : -, "
                                       "starting with a letter or digit")
    return value


def _check_reason(reason: str) -> str:
    text = reason.strip() if isinstance(reason, str) else ""
    if not text or len(text) > MAX_REASON_LENGTH:
        raise ValueError(f"reason must be 1-{MAX_REASON_LENGTH} characters")
    return text


def configure(conn: psycopg.Connection[Any], subscription_id: str, *, headers: Mapping[str, str] | None = None,
              description: str | None = None, metadata: Mapping[str, Any] | None = None,
              actor: str = APP_ACTOR) -> dict[str, Any]:
    """Set ``subscription_id``'s own headers (all of them: ``{}`` removes
    them), description and/or metadata (None: keep); returns what changed
    (header names, never their values). Audited as "configure" when something
    changed. Raises InvalidSubscriptionError, UnknownSubscriptionError,
    SubscriptionDeletedError."""
    settings = _checked_settings(headers, description, metadata)
    if all(value is None for value in settings.values()):
        raise InvalidSubscriptionError("nothing to change: give headers, a description or metadata")
    with conn.transaction():
        _lock(conn, subscription_id)
        changed = endpoint_settings.write(conn, subscription_id, **settings)
        if changed:
            _record(conn, subscription_id, "configure", actor, changed)
    return changed


def current_secret(conn: psycopg.Connection[Any], subscription_id: str, *, actor: str = APP_ACTOR) -> str:
    """The signing secret ``subscription_id`` signs with now. Every read is
    recorded in the audit ("secret-read", by ``actor``), in the transaction that
    reads it. Raises UnknownSubscriptionError, SubscriptionDeletedError."""
    with conn.transaction():
        _lock(conn, subscription_id)
        row = conn.execute(SQL["current_secret"], {"webhook_id": subscription_id}).fetchone()
        assert row is not None  # locked just now
        _record(conn, subscription_id, "secret-read", actor, {})
    return str(row[0])


def _checked_settings(headers: Mapping[str, str] | None, description: str | None,
                      metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    return {"headers": _checked(endpoint_settings.check_headers, headers) if headers is not None else None,
            "description": _checked(endpoint_settings.check_description, description),
            "metadata": _checked(endpoint_settings.check_metadata, metadata)}


def _checked(check: Callable[[Any], Any], value: Any) -> Any:
    try:
        return check(value)
    except ValueError as exc:
        raise InvalidSubscriptionError(str(exc)) from None
