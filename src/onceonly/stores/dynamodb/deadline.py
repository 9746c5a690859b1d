"""One deadline per store call: fixed when the call starts, it bounds every
request the call sends, wherever it runs (the caller's thread or the store's
pool). A botocore ``before-send`` hook applies it to each attempt, so that
botocore neither waits for a reply past it nor sends (or retries) after it.
docs/coordination.md, "DynamoDB: one deadline per call"."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ...errors import OnceOnlyError, StoreUnavailableError

HOOK_EVENT = "before-send.dynamodb"
HOOK_ID = "onceonly-call-deadline"
# The deadline of the call the current thread sends requests for.
_active = threading.local()
_T = TypeVar("_T")


@dataclass
class Deadline:
    """One store call's time bound: every request it sends, retries included,
    must start before ``at`` (time.monotonic)."""

    what: str
    seconds: float
    at: float = field(init=False)
    first: bool = field(init=False, default=True)  # no request sent yet

    def __post_init__(self) -> None:
        self.at = time.monotonic() + self.seconds

    def remaining(self) -> float:
        return self.at - time.monotonic()


class DeadlinePassed(Exception):
    """Raised by the hook: botocore neither sends nor retries the request."""

    def __init__(self, attempt: int) -> None:
        super().__init__(f"the call's deadline passed before attempt {attempt}")
        self.attempt = attempt


class CutOff(StoreUnavailableError):
    """One request of a call that its deadline cut off: ``sent`` when it may
    have reached DynamoDB (and been applied), not when it never left."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


def bound_by_deadline(request: Any, **_: Any) -> None:
    """The ``before-send`` hook, run before every attempt of every request:
    past the deadline of the thread's call, refuse to send (a retry included);
    before it, wait for the reply no longer than the time left (botocore honours
    a per-request ``read_timeout`` in its recent versions; older ones keep the
    client's, and only the caller stops waiting)."""
    deadline: Deadline | None = getattr(_active, "deadline", None)
    context = getattr(request, "context", None)
    if deadline is None or context is None:
        return
    remaining = deadline.remaining()
    if remaining <= 0:
        raise DeadlinePassed(int(context.get("retries", {}).get("attempt", 1)))
    configured = context["client_config"].read_timeout
    context["read_timeout"] = min(configured, remaining) if configured else remaining


def current() -> Deadline | None:
    """The deadline this thread runs requests under, if any."""
    deadline: Deadline | None = getattr(_active, "deadline", None)
    return deadline


def outcome(request: Callable[[], _T]) -> _T | OnceOnlyError:
    """``request``'s result, or the onceonly error it raised."""
    try:
        return request()
    except OnceOnlyError as exc:
        return exc


def under(deadline: Deadline, request: Callable[[], _T]) -> _T | OnceOnlyError:
    """:func:`outcome` of ``request``, with this thread's requests bound by ``deadline``."""
    _active.deadline = deadline
    try:
        return outcome(request)
    finally:
        _active.deadline = None
