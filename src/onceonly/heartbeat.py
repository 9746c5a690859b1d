"""Keep a lease alive while work runs, and tell the work at once when it is not.

Why short leases: a holder that dies (SIGKILL, out of memory, a Lambda timeout)
cannot release, so its lease blocks everyone else until it expires. With a
heartbeat the lease only has to outlive the gap between two renewals, not the
whole job, and a dead holder's lease is gone within one ttl of its death.

Deadline-driven. A holder knows when its lease ends only by its own clock, so
it counts conservatively (:class:`LeaseClock`): from *before* the request that
granted or renewed the lease was sent, plus the ttl, less a drift allowance
(Redlock's: 1 % of the ttl plus 2 ms), less the clock skew the store assumes
between its clients (``store.clock_skew``: 0 where the server's clock decides
expiry, PostgreSQL and Redis; DynamoDB's ``clock_skew`` option, 1 s by default,
because there a contender's clock decides when the lease has ended, and one
running ahead by that much takes it over that much early). Against that end:

- a renewal starts when what is left of the lease falls to ``ttl - interval``,
  that is ``interval`` after the previous successful one was *sent*, however
  long it took to answer;
- a failed renewal is tried again ``interval / 2`` after it started, for as
  long as the lease lasts: a store hiccup shorter than the lease is ridden out;
- each renewal runs on a thread of its own and is waited for only until the
  lease's end, so one that hangs (for up to the store's timeout) cannot hold
  the heartbeat past it;
- once the end passes without a successful renewal, or a renewal finds the
  lease taken (LeaseLostError), the lease counts as lost: ``on_lost`` fires
  once and the heartbeat stops. The work should stop; its fenced writes are
  refused anyway once a newer holder exists (the last line of defence).

What it does not do: keep a *stopped* process's lease alive. A paused process
(SIGSTOP, a frozen container, a long GC pause) pauses these threads too, so its
lease runs out and a newer holder may take over; fencing tokens then refuse the
paused holder's late writes, as without a heartbeat.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from .errors import LeaseLostError, OnceOnlyError

_log = logging.getLogger("onceonly.heartbeat")

# Redlock's clock drift allowance: the local clock may run up to 1 % fast
# against the store's, plus 2 ms for the timer's own granularity.
DRIFT_FACTOR = 0.01
DRIFT_FLOOR = 0.002


def assumed_skew(store: object) -> float:
    """How far the store assumes its clients' clocks may be apart, in seconds:
    its ``clock_skew``, or 0 for a store without one (expiry by the server's clock)."""
    skew = getattr(store, "clock_skew", 0.0)
    return float(skew) if isinstance(skew, (int, float)) and not isinstance(skew, bool) and skew > 0 else 0.0


class LeaseClock:
    """When a held lease ends, by this process's monotonic clock, counted
    conservatively (see the module docstring), ``skew`` seconds early.
    ``changed`` is notified on every renewal, so a heartbeat waiting on it
    follows the new end at once."""

    def __init__(self, sent: float, ttl: float, skew: float = 0.0) -> None:
        self.changed = threading.Condition()
        self.skew = skew
        self._ends_at = _end(sent, ttl, skew)

    @property
    def ends_at(self) -> float:
        return self._ends_at

    def renewed(self, sent: float, ttl: float) -> None:
        """The lease was renewed for ``ttl`` by a request sent at ``sent``
        (``time.monotonic()`` taken before sending it)."""
        with self.changed:
            self._ends_at = _end(sent, ttl, self.skew)
            self.changed.notify_all()


def _end(sent: float, ttl: float, skew: float) -> float:
    return sent + ttl - (ttl * DRIFT_FACTOR + DRIFT_FLOOR) - skew


class _Renewal:
    """One renewal on a thread of its own: the heartbeat waits for it only
    until the lease's end, however long the store takes to answer."""

    def __init__(self, renew: Callable[[], object], changed: threading.Condition, name: str) -> None:
        self.started = time.monotonic()
        self.done = False
        self.error: BaseException | None = None
        self._renew, self._changed = renew, changed
        self.thread = threading.Thread(target=self._run, name=f"onceonly-renewal:{name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._renew()
        except BaseException as exc:  # handed to the heartbeat thread, which decides
            self.error = exc
        finally:
            with self._changed:
                self.done = True
                self._changed.notify_all()


class Heartbeat:
    """``with Heartbeat(renew, clock, ttl, interval, name=…): work()`` keeps the
    lease alive while the block runs (schedule: module docstring).

    ``renew()`` renews the lease for ``ttl`` and reports it to ``clock``
    (:meth:`onceonly.Tick.renew` does). ``on_lost(error)`` is called once, from
    the heartbeat thread, when the lease is lost: its end passed without a
    successful renewal, or a renewal raised LeaseLostError. ``lost`` is that
    error. Other onceonly errors (StoreUnavailableError) are logged and the
    renewal tried again; anything else is a bug: the lease is given up as lost
    and the error raised in the heartbeat thread.

    Leaving the block stops the thread and waits for a renewal in flight (at
    most ``join_timeout`` seconds), so nothing renews the lease after the
    caller went on to complete or release it.
    """

    def __init__(self, renew: Callable[[], object], clock: LeaseClock, ttl: float, interval: float, *,
                 name: str, on_lost: Callable[[LeaseLostError], object] | None = None, log: Any = None,
                 fields: dict[str, Any] | None = None, join_timeout: float = 30.0) -> None:
        self._renew = renew
        self._clock = clock
        # Renew when this much of the lease (as the clock counts it, skew
        # taken off) is left: ``interval`` after the previous renewal was sent.
        self._lead = ttl - interval - clock.skew
        self._retry = interval / 2
        self._name = name
        self._on_lost = on_lost
        self._log = log if log is not None else _log
        self._fields = fields or {}
        self._join_timeout = join_timeout
        self._stopped = False
        self._renewal: _Renewal | None = None
        self._thread = threading.Thread(target=self._beat, name=f"onceonly-heartbeat:{name}", daemon=True)
        self.lost: LeaseLostError | None = None
        self.beats = 0  # successful renewals, for logs and tests

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        with self._clock.changed:
            self._stopped = True
            self._clock.changed.notify_all()
        until = time.monotonic() + self._join_timeout
        self._thread.join(self._join_timeout)
        renewal = self._renewal
        if renewal is not None:
            renewal.thread.join(max(0.0, until - time.monotonic()))
        if self._thread.is_alive() or (renewal is not None and renewal.thread.is_alive()):
            self._log.warning("heartbeat still renewing after the work ended; the store is slow",
                              extra=self._fields)

    def _beat(self) -> None:
        bug: list[BaseException] = []
        lost = self._next_loss(bug)
        if lost is not None:
            self.lost = lost
            self._log.warning("heartbeat: the lease was lost; the work is told to stop",
                              extra={**self._fields, "error": str(lost)})
            if self._on_lost is not None:
                self._on_lost(lost)
        if bug:
            raise bug[0]  # reported by threading.excepthook

    def _next_loss(self, bug: list[BaseException]) -> LeaseLostError | None:
        """Renew on schedule until stopped (None) or the lease is lost (why);
        a renewal's unexpected error is put in ``bug``."""
        changed, retry_at = self._clock.changed, -math.inf
        with changed:
            while not self._stopped:
                renewal, now = self._renewal, time.monotonic()
                if renewal is not None and renewal.done:
                    self._renewal = None
                    lost = self._settle(renewal.error, bug)
                    if lost is not None:
                        return lost
                    continue  # the end may have moved: look again
                ends_at = self._clock.ends_at
                if now >= ends_at:
                    return LeaseLostError(f"lease {self._name!r} ended by the local clock without a "
                                          "successful renewal (the store failed or did not answer in time)")
                if renewal is not None:  # in flight: wait for it, but not past the lease's end
                    changed.wait(ends_at - now)
                    continue
                due = max(ends_at - self._lead, retry_at)
                if now < due:
                    changed.wait(min(due, ends_at) - now)
                    continue
                self._renewal = _Renewal(self._renew, changed, self._name)
                retry_at = now + self._retry
        return None

    def _settle(self, error: BaseException | None, bug: list[BaseException]) -> LeaseLostError | None:
        """What a finished renewal means: None to go on, or why the lease is lost."""
        if error is None:
            self.beats += 1
            return None
        if isinstance(error, LeaseLostError):
            return error
        if isinstance(error, OnceOnlyError):
            self._log.warning("heartbeat: renewal failed, trying again while the lease lasts",
                              extra={**self._fields, "error": str(error)})
            return None
        bug.append(error)
        return LeaseLostError(f"lease {self._name!r}: renewing it failed: {error!r}")
