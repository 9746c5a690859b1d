"""The socket watchdog: one thread per process fires each deadline, an
earlier deadline added after a later one is not kept waiting behind it, and
a stopped watchdog never touches its sockets."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from onceonly_app.runtime.budget import Budget
from onceonly_app.webhooks.watchdog import SocketWatchdog


def _blocked_read(sock: socket.socket) -> tuple[threading.Thread, list[float]]:
    """A thread blocked reading ``sock``; ``ended`` gets the time the read returned."""
    ended: list[float] = []

    def read() -> None:
        with contextlib.suppress(OSError):  # a shutdown may end the read with an error
            sock.recv(1)
        ended.append(time.monotonic())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader, ended


def test_an_earlier_deadline_fires_before_a_later_one_added_first() -> None:
    late_pair, early_pair = socket.socketpair(), socket.socketpair()
    try:
        late = SocketWatchdog(Budget.after(30.0))
        late.watch(late_pair[0])
        started = time.monotonic()
        early = SocketWatchdog(Budget.after(0.2))
        early.watch(early_pair[0])
        reader, ended = _blocked_read(early_pair[0])
        reader.join(5.0)
        assert ended, "the earlier deadline never shut its socket down"
        assert 0.15 <= ended[0] - started < 5.0
        assert early.fired and not late.fired
        late.stop()
        early.stop()
    finally:
        for sock in (*late_pair, *early_pair):
            sock.close()


def test_a_stopped_watchdog_leaves_its_socket_alone() -> None:
    pair = socket.socketpair()
    try:
        watchdog = SocketWatchdog(Budget.after(0.1))
        watchdog.watch(pair[0])
        watchdog.stop()
        time.sleep(0.3)  # past the deadline
        assert not watchdog.fired
        pair[1].sendall(b"x")
        assert pair[0].recv(1) == b"x"  # still open both ways
    finally:
        for sock in pair:
            sock.close()
