"""Standard Webhooks signatures, made by the ``standardwebhooks`` package (never
a hand-rolled HMAC): ``v1,`` + base64 HMAC-SHA256 of ``id.timestamp.body``."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime

from standardwebhooks import Webhook

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """A fresh ``whsec_`` signing secret (24 random bytes, base64)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode("ascii")


def signed_headers(keys: str | Sequence[str], msg_id: str, body: str, now: float) -> dict[str, str]:
    """The three Standard Webhooks headers for one attempt. ``msg_id`` is the
    delivery id (the same on every attempt); the timestamp is the attempt's.
    With several ``keys`` (a rotation's overlap) the signature header holds
    one space-separated ``v1,…`` per secret, as Standard Webhooks allows: a
    receiver verifying with any one of them passes."""
    timestamp = datetime.fromtimestamp(int(now), tz=UTC)
    signing = [keys] if isinstance(keys, str) else list(keys)
    if not signing:
        raise ValueError("at least one signing secret is needed")
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now)),
        "webhook-signature": " ".join(Webhook(key).sign(msg_id=msg_id, timestamp=timestamp, data=body)
                                      for key in signing),
    }
