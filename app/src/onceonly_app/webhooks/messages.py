"""The SQS message that asks for a webhook delivery:
``{"webhook_id": str, "tenant_id": str, "event_id": str, "event_type": str,
"payload": object, "occurred_at"?: ISO 8601 with offset, "sequence"?: int}``.

``tenant_id`` is the event's tenant: the delivery keeps it, and an attempt is
refused unless it is the subscription's tenant too. ``occurred_at`` and
``sequence`` are what a receiver orders events by (docs/webhooks.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from onceonly_app.events.limits import PayloadError, encoded_payload

MAX_ID_LENGTH = 256
REQUIRED = ("webhook_id", "tenant_id", "event_id", "event_type", "payload")


class MalformedMessageError(ValueError):
    """The message cannot be delivered as sent; retrying it will not help.
    The message says which field is wrong, never what the payload holds."""


@dataclass(frozen=True)
class DeliveryRequest:
    webhook_id: str
    event_id: str
    event_type: str
    payload: Any
    tenant_id: str
    occurred_at: datetime | None = None  # when the change happened; None: when the delivery was created
    sequence: int | None = None  # larger for a later change of the same invoice


def parse_message(body: Any) -> DeliveryRequest:
    """Parse and validate one message body. Raises MalformedMessageError."""
    if body is None or isinstance(body, str | bytes) and not body.strip():
        raise MalformedMessageError("empty message body")
    if not isinstance(body, str | bytes):
        raise MalformedMessageError(f"body must be a string, got {type(body).__name__}")
    # ValueError: JSONDecodeError, UnicodeDecodeError, and a number of more digits
    # than int() takes (sys.get_int_max_str_digits); RecursionError: nested too deep.
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise MalformedMessageError(f"body is not JSON: {exc.__class__.__name__} at position "
                                    f"{getattr(exc, 'pos', '?')}") from exc
    if not isinstance(data, dict):
        raise MalformedMessageError(f"body must be a JSON object, got {type(data).__name__}")
    missing = [name for name in REQUIRED if name not in data]
    if missing:
        raise MalformedMessageError(f"missing field(s): {', '.join(missing)}")
    for name in ("webhook_id", "tenant_id", "event_id", "event_type"):
        _check_id(name, data[name])
    if data["payload"] is None:
        raise MalformedMessageError("payload must not be null")
    try:
        encoded_payload(data["payload"])  # too large, or a string jsonb cannot store: never deliverable
    except PayloadError as exc:
        raise MalformedMessageError(str(exc)) from None
    return DeliveryRequest(data["webhook_id"], data["event_id"], data["event_type"], data["payload"],
                           data["tenant_id"], _occurred_at(data.get("occurred_at")),
                           _sequence(data.get("sequence")))


def _check_id(name: str, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise MalformedMessageError(f"{name} must be a non-empty string, got {type(value).__name__}")
    if len(value) > MAX_ID_LENGTH:
        raise MalformedMessageError(f"{name} is longer than {MAX_ID_LENGTH} characters")
    if "\x00" in value or _not_utf8(value):
        raise MalformedMessageError(f"{name} holds a NUL or a lone surrogate, which PostgreSQL text cannot store")


def _not_utf8(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _occurred_at(value: Any) -> datetime | None:
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise MalformedMessageError("occurred_at must be an ISO 8601 time with an offset")
    return when


def _sequence(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise MalformedMessageError("sequence must be a non-negative 64-bit integer")
    return value
