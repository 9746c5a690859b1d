"""The heartbeat thread on its own: it renews until stopped, rides out a store
hiccup, and stops for good once the lease is lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import onceonly
from onceonly.heartbeat import Heartbeat, LeaseClock


class Renewals:
    """A renew() that fails as scripted, then succeeds (and reports the renewal
    to the lease's clock, as Tick.renew does); records every call."""

    def __init__(self, *failures: Exception, ttl: float = 1.0) -> None:
        self.failures = list(failures)
        self.calls = 0
        self.called = threading.Event()
        self.ttl = ttl
        self.clock = LeaseClock(time.monotonic(), ttl)

    def __call__(self) -> None:
        sent = time.monotonic()
        self.calls += 1
        self.called.set()
        if self.failures:
            raise self.failures.pop(0)
        self.clock.renewed(sent, self.ttl)

    def heartbeat(self, interval: float, **options: Any) -> Heartbeat:
        return Heartbeat(self, self.clock, self.ttl, interval, name="n", **options)


def wait_until(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_renews_until_stopped_and_not_after() -> None:
    renew = Renewals()
    with renew.heartbeat(0.01) as beat:
        wait_until(lambda: beat.beats >= 3, "three renewals")
    calls = renew.calls
    renew.called.clear()
    assert not renew.called.wait(0.1)  # ten intervals later: nothing renewed after the exit
    assert renew.calls == calls and beat.lost is None


def test_a_store_hiccup_is_retried_at_the_next_beat() -> None:
    renew = Renewals(onceonly.StoreUnavailableError("timeout"), onceonly.StoreUnavailableError("timeout"))
    with renew.heartbeat(0.01) as beat:
        wait_until(lambda: beat.beats >= 1, "a renewal after two failures")
    assert renew.calls >= 3 and beat.lost is None


def test_a_lost_lease_ends_the_heartbeat() -> None:
    renew = Renewals(onceonly.LeaseLostError("re-granted"))
    beat = renew.heartbeat(0.01)
    with beat:
        wait_until(lambda: beat.lost is not None, "the loss noticed")
        renew.called.clear()
        assert not renew.called.wait(0.1)  # no renewal after the loss
    assert renew.calls == 1 and beat.beats == 0
    assert str(beat.lost) == "re-granted"


def test_a_bug_in_renew_is_not_swallowed() -> None:
    renew = Renewals(TypeError("bug"))
    errors: list[BaseException | None] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)
    try:
        with renew.heartbeat(0.01):
            wait_until(lambda: errors, "the error reported")
    finally:
        threading.excepthook = previous
    assert isinstance(errors[0], TypeError)

