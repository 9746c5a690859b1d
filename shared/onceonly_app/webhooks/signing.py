"""Standard Webhooks signatures, made by the ``standardwebhooks`` package (never
a hand-rolled HMAC): ``v1,`` + base64 HMAC-SHA256 of ``id.timestamp.body``."""

from __future__ import annotations

import base64
import secrets
from datetime import UTC, datetime

from standardwebhooks import Webhook

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """A fresh ``whsec_`` signing secret (24 random bytes, base64)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode("ascii")


def signed_headers(secret: str, msg_id: str, body: str, now: float) -> dict[str, str]:
    """The three Standard Webhooks headers for one attempt. ``msg_id`` is the
    delivery id (the same on every attempt); the timestamp is the attempt's."""
    timestamp = datetime.fromtimestamp(int(now), tz=UTC)
    signature = Webhook(secret).sign(msg_id=msg_id, timestamp=timestamp, data=body)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now)),
        "webhook-signature": signature,
    }
