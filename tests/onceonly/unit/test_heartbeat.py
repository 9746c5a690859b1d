"""The heartbeat thread on its own: it renews until stopped, rides out a store
hiccup, and stops for good once the lease is lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

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



def test_a_renewal_that_hangs_is_not_waited_for_past_the_lease_end() -> None:
    """The old heartbeat sat in a hung renew() until the store's timeout; this
    one gives the lease up at its end, with the renewal still hanging."""
    release = threading.Event()
    renew = Renewals(ttl=0.3)
    clock = renew.clock

    def hangs() -> None:
        renew()
        release.wait(30)

    lost: list[tuple[float, bool]] = []
    beat = Heartbeat(hangs, clock, 0.3, 0.1, name="n",
                     on_lost=lambda error: lost.append((time.monotonic(), release.is_set())))
    with beat:
        try:
            wait_until(lambda: lost, "the loss noticed")
        finally:
            release.set()  # before the exit, which waits for the renewal in flight
    assert beat.lost is not None and "without a successful renewal" in str(beat.lost)
    when, renewal_returned = lost[0]
    assert not renewal_returned and when >= clock.ends_at  # not before the end either
    assert renew.calls == 1  # one renewal in flight at a time


def test_renewals_start_an_interval_after_the_previous_one_was_sent() -> None:
    """A slow answer does not push the next renewal late: with renewals that
    take 0.15 s, one starts every 0.2 s (the old heartbeat: every 0.35 s)."""
    starts: list[float] = []
    clock = LeaseClock(time.monotonic(), 0.6)

    def slow() -> None:
        sent = time.monotonic()
        starts.append(sent)
        time.sleep(0.15)
        clock.renewed(sent, 0.6)

    with Heartbeat(slow, clock, 0.6, 0.2, name="n") as beat:
        wait_until(lambda: beat.beats >= 6, "six renewals")
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert beat.lost is None
    assert sum(gaps) / len(gaps) < 0.3, gaps


def test_the_lease_end_counts_from_before_the_request_less_the_drift_allowance() -> None:
    clock = LeaseClock(100.0, 30.0)
    assert clock.ends_at == 100.0 + 30.0 - (0.3 + 0.002)
    clock.renewed(110.0, 30.0)
    assert clock.ends_at == 110.0 + 30.0 - 0.302


def test_the_lease_clock_takes_the_assumed_skew_off_every_end() -> None:
    """A store whose clients' clocks decide expiry (DynamoDB): the holder
    counts its lease as ended ``skew`` early, after the grant and after each
    renewal, on top of the drift allowance."""
    clock = LeaseClock(100.0, 30.0, skew=1.0)
    assert clock.ends_at == pytest.approx(100.0 + 30.0 - (0.3 + 0.002) - 1.0)
    clock.renewed(110.0, 30.0)
    assert clock.ends_at == pytest.approx(110.0 + 30.0 - (0.3 + 0.002) - 1.0)
    assert LeaseClock(100.0, 30.0).ends_at == pytest.approx(100.0 + 30.0 - 0.302)
