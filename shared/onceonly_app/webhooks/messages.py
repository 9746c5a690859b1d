"""The SQS message that asks for a webhook delivery:
``{"webhook_id": str, "event_id": str, "event_type": str, "payload": object}``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MAX_ID_LENGTH = 256
REQUIRED = ("webhook_id", "event_id", "event_type", "payload")


class MalformedMessageError(ValueError):
    """The message cannot be delivered as sent; retrying it will not help.
    The message says which field is wrong, never what the payload holds."""


@dataclass(frozen=True)
class DeliveryRequest:
    webhook_id: str
    event_id: str
    event_type: str
    payload: Any


def parse_message(body: str | bytes | None) -> DeliveryRequest:
    """Parse and validate one message body. Raises MalformedMessageError."""
    if body is None or not body.strip():
        raise MalformedMessageError("empty message body")
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MalformedMessageError(f"body is not JSON: {exc.__class__.__name__} at position "
                                    f"{getattr(exc, 'pos', '?')}") from exc
    if not isinstance(data, dict):
        raise MalformedMessageError(f"body must be a JSON object, got {type(data).__name__}")
    missing = [name for name in REQUIRED if name not in data]
    if missing:
        raise MalformedMessageError(f"missing field(s): {', '.join(missing)}")
    for name in ("webhook_id", "event_id", "event_type"):
        _check_id(name, data[name])
    if data["payload"] is None:
        raise MalformedMessageError("payload must not be null")
    return DeliveryRequest(data["webhook_id"], data["event_id"], data["event_type"], data["payload"])


def _check_id(name: str, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise MalformedMessageError(f"{name} must be a non-empty string, got {type(value).__name__}")
    if len(value) > MAX_ID_LENGTH:
        raise MalformedMessageError(f"{name} is longer than {MAX_ID_LENGTH} characters")
