"""Size limits of webhook delivery (docs/security.md, "Payload size limits").

- A webhook event's payload is at most MAX_PAYLOAD_BYTES as compact UTF-8
  JSON. The outbox refuses a larger one when the event is enqueued (the
  change's transaction fails, with this error), and the dispatcher refuses a
  larger message as malformed: it goes to the dead-letter queue, unsent.
- That limit keeps a whole message (payload plus ids and envelope) well under
  SQS's 256 KiB, which also caps the sum of one SendMessageBatch call: the
  outbox splits its batches by size (SQS_MAX_BATCH_BYTES).
- Of a receiver's response, at most MAX_RESPONSE_BYTES of the body are read
  (for the error text of a failed attempt); a 2xx body is never read."""

from __future__ import annotations

from typing import Any

from onceonly import encode_payload
from onceonly.errors import ConfigError

MAX_PAYLOAD_BYTES = 64 * 1024
SQS_MAX_BATCH_BYTES = 256 * 1024  # one message, and one SendMessageBatch request in total
MAX_RESPONSE_BYTES = 512


class PayloadError(ValueError):
    """The payload cannot be sent as a webhook: too large, not strict JSON, or a
    string that PostgreSQL's jsonb or UTF-8 cannot hold (NUL, a lone surrogate).
    The message says which, never what the payload holds."""


def encoded_payload(payload: Any) -> str:
    """The payload as compact JSON (the queue layer's encoding), checked against
    MAX_PAYLOAD_BYTES. Raises PayloadError."""
    try:
        return encode_payload(payload, limit=MAX_PAYLOAD_BYTES)
    except ConfigError as exc:
        raise PayloadError(str(exc)) from None
