"""Named pause points of the billing jobs, injected from the test side.

A test's child process calls :func:`install` before it loads a handler; the job
then stops its own process (SIGSTOP) the first time it reaches that point. The
test kills it there (a crash mid-job) or lets its leases expire and resumes it
with SIGCONT (a run paused past its lease). Nothing of this ships in the layer:
each point wraps a function that the job calls at that moment of its run.
"""

from __future__ import annotations

import functools
import importlib
import os
import signal
from collections.abc import Callable
from typing import Any, Literal, NamedTuple


class PausePoint(NamedTuple):
    module: str
    attribute: str  # "function" or "Class.method"
    when: Literal["before", "after"]  # stop before the call, or after it returned


POINTS = {
    # the tick's fence is stamped, no invoice has moved yet
    "overdue.before_transitions": PausePoint("onceonly_app.billing.ticks", "TickFence.stamp", "after"),
    # the outbox rows are claimed (status 'sending'), nothing reached SES yet
    "notifications.before_send": PausePoint("onceonly_app.billing.ses", "SesNotifier.send", "before"),
    # the tick is claimed, no invoice generated yet
    "recurring.before_generate": PausePoint("onceonly_app.billing.recurring", "run", "before"),
    # a page of payments was fetched, none applied yet
    "payments.before_apply": PausePoint("onceonly_app.billing.payments_api", "PaymentsClient.page", "after"),
    # the payments are committed, their webhook events not yet sent to SQS
    "payments.before_publish": PausePoint("onceonly_app.events.outbox", "flush", "before"),
}


def _stop_self() -> None:
    os.kill(os.getpid(), signal.SIGSTOP)


def install(name: str) -> None:
    """Make this process stop itself at the point ``name``, once: a resumed run
    does not stop there again."""
    point = POINTS[name]
    owner: Any = importlib.import_module(point.module)
    *path, attribute = point.attribute.split(".")
    for part in path:
        owner = getattr(owner, part)
    original: Callable[..., Any] = getattr(owner, attribute)
    reached: list[bool] = []

    @functools.wraps(original)
    def pausing(*args: Any, **kwargs: Any) -> Any:
        first = not reached
        reached.append(True)
        if first and point.when == "before":
            _stop_self()
        result = original(*args, **kwargs)
        if first and point.when == "after":
            _stop_self()
        return result

    setattr(owner, attribute, pausing)
