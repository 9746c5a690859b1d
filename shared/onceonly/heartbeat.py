"""Keep a lease alive while work runs: renew it every ``interval`` seconds from a
daemon thread, so the lease itself can stay short.

Why short leases: a holder that dies (SIGKILL, out of memory, a Lambda timeout)
cannot release, so its lease blocks everyone else until it expires. With a
heartbeat the lease only has to outlive the gap between two renewals, not the
whole job, and a dead holder's lease is gone within one ttl of its death.

What it does not do: keep a *stopped* process's lease alive. A paused process
(SIGSTOP, a frozen container, a long GC pause) pauses this thread too, so its
lease runs out and a newer holder may take over; fencing tokens then refuse the
paused holder's late writes, as without a heartbeat.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

from .errors import LeaseLostError, OnceOnlyError

_log = logging.getLogger("onceonly.heartbeat")


class Heartbeat:
    """``with Heartbeat(renew, interval): work()`` calls ``renew()`` every
    ``interval`` seconds until the block exits; the exit stops the thread and
    waits for a renewal in flight (at most ``join_timeout`` seconds), so nothing
    renews the lease after the caller went on to complete or release it.

    ``renew`` raising LeaseLostError ends the heartbeat for good (``lost`` is
    set): another holder owns the name now, and renewing is pointless. Any other
    onceonly error (StoreUnavailableError) is logged and retried at the next
    beat: the lease survives a store hiccup shorter than its ttl.
    """

    def __init__(self, renew: Callable[[], object], interval: float, *, name: str,
                 log: Any = None, fields: dict[str, Any] | None = None, join_timeout: float = 30.0) -> None:
        self._renew = renew
        self._interval = interval
        self._log = log if log is not None else _log
        self._fields = fields or {}
        self._join_timeout = join_timeout
        self._stop = threading.Event()
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
        self._stop.set()
        self._thread.join(self._join_timeout)
        if self._thread.is_alive():
            self._log.warning("heartbeat still renewing after the work ended; the store is slow",
                              extra=self._fields)

    def _beat(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._renew()
            except LeaseLostError as exc:
                self.lost = exc
                self._log.warning("heartbeat: the lease was lost, another holder owns it now",
                                  extra={**self._fields, "error": str(exc)})
                return
            except OnceOnlyError as exc:
                self._log.warning("heartbeat: renewal failed, retrying at the next beat",
                                  extra={**self._fields, "error": str(exc)})
            else:
                self.beats += 1
