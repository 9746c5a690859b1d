"""One deadline (a Budget, onceonly_app/runtime/budget.py) for everything an attempt
waits on: the DNS lookup, the connect, the TLS handshake, the response headers
and the body.

Socket timeouts alone cannot give that: they bound each read, so an endpoint
that trickles a byte a second keeps a request open for as long as it likes.
:class:`SocketWatchdog` shuts the attempt's socket down when the deadline passes,
which ends any read or handshake blocked on it; :func:`resolve_within` gives up on
a DNS lookup that outlives the deadline (getaddrinfo itself cannot be cut short,
so it finishes in a daemon thread whose answer is dropped)."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from onceonly_app.runtime.budget import Budget, DeadlineExceededError


class SocketWatchdog:
    """Shuts down the watched sockets when the deadline passes, unless stopped first.

    ``stop()`` must be called before the sockets are closed: the lock makes the
    shutdown and the stop exclusive, so the watchdog never touches a file
    descriptor that was closed (and maybe reused) after the attempt ended.
    One thread per process watches every deadline (_DeadlineWatcher), not a
    timer thread per request."""

    def __init__(self, deadline: Budget) -> None:
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.stopped = False
        self.fired = False
        _WATCHER.watch(time.monotonic() + deadline.remaining(), self)

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.fired:
                _shutdown(sock)

    def fire(self) -> None:
        with self._lock:
            if self.stopped:
                return
            self.fired = True
            for sock in self._sockets:
                _shutdown(sock)

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
            self._sockets.clear()

    def __enter__(self) -> SocketWatchdog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _DeadlineWatcher:
    """One daemon thread that fires each watchdog when its deadline passes. A
    stopped watchdog stays in the heap until its deadline, then is dropped
    unfired. Started on first use, and again in a forked child (which has
    no copy of the thread)."""

    def __init__(self) -> None:
        self._pid = -1

    def watch(self, at: float, watchdog: SocketWatchdog) -> None:
        if self._pid != os.getpid():
            self._start()
        with self._wake:
            heapq.heappush(self._due, (at, next(self._order), watchdog))
            if self._due[0][2] is watchdog:
                self._wake.notify()  # an earlier deadline than the one waited for

    def _start(self) -> None:
        with _START_LOCK:
            if self._pid == os.getpid():
                return
            self._wake = threading.Condition()
            self._due: list[tuple[float, int, SocketWatchdog]] = []
            self._order = itertools.count()
            threading.Thread(target=self._run, name="socket-watchdog", daemon=True).start()
            self._pid = os.getpid()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._wake.wait(self._due[0][0] - time.monotonic() if self._due else None)
                _, _, watchdog = heapq.heappop(self._due)
            watchdog.fire()  # outside the heap's lock: a shutdown may take a moment


_START_LOCK = threading.Lock()
_WATCHER = _DeadlineWatcher()


def _shutdown(sock: socket.socket) -> None:
    # socket.socket.shutdown, not SSLSocket.shutdown: the latter drops the TLS
    # object under the reader blocked in another thread; shutting the file
    # descriptor down just makes that read return.
    with contextlib.suppress(OSError):  # already closed or never connected: nothing is blocked on it
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def resolve_within(resolve: Callable[..., list[Any]], host: str, port: int, deadline: Budget) -> list[Any]:
    """``resolve(host, port, type=SOCK_STREAM)`` in a daemon thread, waited for no
    longer than the deadline. Raises DeadlineExceededError when it is not back in
    time; exceptions of the lookup itself are re-raised here."""
    outcome: list[Any] = []
    done = threading.Event()

    def lookup() -> None:
        try:
            outcome.append((True, resolve(host, port, type=socket.SOCK_STREAM)))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread as is
            outcome.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=lookup, name=f"resolve-{host}", daemon=True).start()
    if not done.wait(deadline.remaining()):
        raise DeadlineExceededError(f"DNS lookup of {host!r} did not finish by the attempt's deadline")
    ok, value = outcome[0]
    if not ok:
        raise value
    return list(value)
