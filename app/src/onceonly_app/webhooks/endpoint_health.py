"""Failing endpoints, as Svix treats them: a subscription whose attempts have
all failed for ``auto_disable_after`` (default 5 days, counted from the first
failure after a success) is disabled, with a reason. Its events are held from
then on, as for any disabled subscription (enabling it releases them).

Notices, each once (keyed by what they announce), in the commit of what
they announce:
- ``endpoint.disabled`` when a subscription is disabled automatically;
- ``message.attempt.exhausted`` when a delivery runs out of attempts;
each as a webhook event to the tenant's operational subscriptions (those
whose filter names the type: `subscriptions add --event-types
endpoint.disabled,message.attempt.exhausted`), and as an e-mail to the
tenant's contact (billing_tenants.contact_email) through the notifications
outbox, which the notifications job sends through SES.

The notices' deliveries are created ``retrying`` and queued due now after the
commit; a safety-net item, due when an attempt lease has passed, is queued
before it, so a crash in between delays them but loses none. Notices about
an operational event are never made (no notice of a notice)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from onceonly import Queue
from onceonly.errors import StoreUnavailableError
from onceonly_app.sql_queries import load_queries

from .deliveries import delivery_id_for

SQL = load_queries(Path(__file__).with_suffix(".sql"))
ENDPOINT_DISABLED = "endpoint.disabled"
MESSAGE_EXHAUSTED = "message.attempt.exhausted"
OPERATIONAL_EVENT_TYPES = (ENDPOINT_DISABLED, MESSAGE_EXHAUSTED)
ACTOR = "auto-disable"  # the audit's actor of an automatic disable
DEFAULT_AUTO_DISABLE_AFTER = 5 * 24 * 3600.0


@dataclass(frozen=True)
class Disabled:
    webhook_id: str
    tenant_id: str
    failing_since: float
    notices: list[str]  # the endpoint.disabled deliveries queued


class EndpointHealth:
    """The health bookkeeping of the dispatch and retry paths. ``clock`` is the
    service's (tests inject one: five days pass in a test)."""

    def __init__(self, pool: ConnectionPool, queue: Queue, *, period: float, lease: float,
                 clock: Callable[[], float], log: logging.Logger | Any) -> None:
        self.pool = pool
        self.queue = queue
        self.period = period
        self.lease = lease
        self.clock = clock
        self.log = log

    def succeeded(self, webhook_id: str, failing_since: float | None) -> None:
        """A success ends the failing period (a write only if one had started)."""
        if failing_since is not None:
            self._execute("stop_failing", {"webhook_id": webhook_id})

    def failed(self, webhook_id: str, failing_since: float | None) -> Disabled | None:
        """Count a failed attempt of an enabled subscription: the first one starts
        the failing period, one that comes ``period`` after its start disables
        the subscription (and sends the notice). Returns what was disabled."""
        now = self.clock()
        if failing_since is None:
            self._execute("start_failing", {"webhook_id": webhook_id, "now": now})
            return None
        if now - failing_since < self.period:
            return None
        return self._disable(webhook_id, failing_since, now)

    def exhausted(self, delivery_id: str, generation: int, tenant_id: str, webhook_id: str, event_id: str,
                  event_type: str, response_code: int | None, error: str | None) -> list[str]:
        """Announce that ``delivery_id`` ran out of attempts (it is dead in
        ``generation``). Returns the notice deliveries queued."""
        if event_type in OPERATIONAL_EVENT_TYPES:
            return []
        event_id_ = f"{MESSAGE_EXHAUSTED}:{delivery_id}:{generation}"
        payload = {"tenant_id": tenant_id, "delivery_id": delivery_id, "subscription_id": webhook_id,
                   "event_id": event_id,
                   "event_type": event_type, "last_attempt": {"response_code": response_code, "error": error,
                                                              "at": _iso(self.clock())}}
        subject = f"Webhook message {delivery_id} to {webhook_id} ran out of attempts"
        body = (f"Every attempt to deliver {event_type} event {event_id} to subscription {webhook_id} failed "
                f"(last: {response_code or 'no response'}, {error or 'no error text'}). It will not be retried; "
                f"`onceonly subscriptions recover {webhook_id} --since T` sends it again.")
        params = {"delivery_id": delivery_id, "generation": generation}
        return self._notify(tenant_id, MESSAGE_EXHAUSTED, event_id_, payload, subject, body,
                            "announce_exhausted", params) or []

    def _disable(self, webhook_id: str, failing_since: float, now: float) -> Disabled | None:
        reason = f"disabled automatically: every attempt failed for {self.period:g} s"
        with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute("SELECT tenant_id FROM webhook_subscriptions WHERE id = %s", (webhook_id,)).fetchone()
        if row is None or row["tenant_id"] is None:
            return None
        tenant_id = str(row["tenant_id"])
        event_id = f"{ENDPOINT_DISABLED}:{webhook_id}:{failing_since:.6f}"
        payload = {"tenant_id": tenant_id, "subscription_id": webhook_id, "failing_since": _iso(failing_since),
                   "reason": reason, "trigger": "automatic"}
        subject = f"Webhook endpoint {webhook_id} was disabled"
        body = (f"Subscription {webhook_id} was disabled automatically: every attempt has failed since "
                f"{_iso(failing_since)}. Its events are kept (held). Fix the endpoint, then "
                f"`onceonly subscriptions enable {webhook_id}` sends them, in order.")
        params = {"webhook_id": webhook_id, "now": now, "period": self.period, "reason": reason, "actor": ACTOR}
        notices = self._notify(tenant_id, ENDPOINT_DISABLED, event_id, payload, subject, body, "auto_disable",
                               params)
        if notices is None:
            return None
        self.log.warning("subscription disabled automatically: every attempt failed for the period",
                         extra={"webhook_id": webhook_id, "failing_since": failing_since, "period": self.period})
        return Disabled(webhook_id, tenant_id, failing_since, notices)

    def _notify(self, tenant_id: str, event_type: str, event_id: str, payload: dict[str, Any], subject: str,
                body: str, statement: str, params: dict[str, Any]) -> Any:
        """Run ``statement`` with the notices of ``event_type`` for the tenant's
        operational subscriptions; queue them. None if the statement wrote nothing."""
        targets = [row["id"] for row in self._rows("operational_subscriptions",
                                                   {"tenant_id": tenant_id, "event_type": event_type})]
        ids = [delivery_id_for(target, event_id) for target in targets]
        # The safety net first: due once a lease has passed, replaced by the
        # due-now item below; a stray one (nothing committed) is acked when claimed.
        self.queue.put_many((delivery_id, self.clock() + self.lease, {"generation": 0}) for delivery_id in ids)
        done = self._rows(statement, {**params, "targets": targets, "delivery_ids": ids, "event_id": event_id,
                                      "payload": json.dumps(payload), "subject": subject, "body": body})
        if not done:
            return None
        self.queue.put_many((delivery_id, None, {"generation": 0}) for delivery_id in ids)
        return ids

    def _execute(self, name: str, params: dict[str, Any]) -> None:
        self._rows(name, params)

    def _rows(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        try:
            with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
                cur.execute(SQL[name], params)
                return cur.fetchall() if cur.description else []
        except psycopg.OperationalError as exc:
            raise StoreUnavailableError(f"domain database unavailable ({name}): "
                                        f"{exc.__class__.__name__}") from exc


def set_contact(conn: psycopg.Connection[Any], tenant_id: str, email: str | None) -> bool:
    """Where ``tenant_id``'s operational e-mails go (None: nowhere). False if
    billing does not know the tenant. Raises ValueError for a malformed address."""
    if email is not None and (not isinstance(email, str) or "@" not in email.strip() or len(email) > 254
                              or any(ch.isspace() for ch in email.strip())):
        raise ValueError(f"not an e-mail address: {email!r}")
    with conn.cursor() as cur:
        return cur.execute(SQL["set_contact"], {"tenant_id": tenant_id,
                                                "email": None if email is None else email.strip()}).fetchone() \
            is not None


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat().replace("+00:00", "Z")
