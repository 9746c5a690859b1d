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

import json
import re
from typing import Any

MAX_PAYLOAD_BYTES = 64 * 1024
SQS_MAX_BATCH_BYTES = 256 * 1024  # one message, and one SendMessageBatch request in total
MAX_RESPONSE_BYTES = 512
# An escaped NUL in JSON text: \u0000 after an even number of backslashes.
JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


class PayloadError(ValueError):
    """The payload cannot be sent as a webhook: too large, or a string in it
    that PostgreSQL's jsonb or UTF-8 cannot hold (NUL, a lone surrogate). The
    message says which, never what the payload holds."""


def encoded_payload(payload: Any) -> str:
    """The payload as compact JSON, checked against the limits. Raises PayloadError."""
    try:
        text = json.dumps(payload, separators=(",", ":"), sort_keys=True, ensure_ascii=False, allow_nan=False)
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise PayloadError("payload holds a string that is not valid UTF-8 (a lone surrogate)") from None
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"payload is not JSON-serialisable ({exc.__class__.__name__})") from None
    if JSON_NUL.search(text):
        raise PayloadError("payload holds a NUL character (\\u0000), which jsonb cannot store")
    if size > MAX_PAYLOAD_BYTES:
        raise PayloadError(f"payload is {size} bytes as JSON; the limit is {MAX_PAYLOAD_BYTES}")
    return text
