"""A TCP fault proxy for tests: put it between a client and a server on 127.0.0.1
and change, at run time, what the link does to their bytes.

    with FaultProxy(target_port=6379) as proxy:
        client = connect(f"redis://127.0.0.1:{proxy.port}/0")
        proxy.blackhole()      # bytes vanish both ways, nothing is closed (no RST, no FIN)
        proxy.lose_replies()   # requests reach the server, its replies vanish
        proxy.lose_replies(once=True)  # only the first connection that gets a reply
                                       # loses it (and all its later ones); a client
                                       # that reconnects is answered again
        proxy.drop()           # close every connection, and each new one at once
        proxy.delay(0.2)       # forward every chunk 0.2 s late
        proxy.delay_replies(0.2)  # forward every chunk of a reply 0.2 s late (requests on time)
        proxy.passthrough()    # back to normal; new connections work again

Modes apply to the next chunk read on every connection, existing ones
included. While bytes are swallowed, a side that closes is not reported to the
other side either: a black hole never tells anyone anything. A connection that
lost bytes is garbage afterwards; clients are expected to drop it on their
timeout and reconnect. ``accepted`` counts the connections accepted so far.

Only 127.0.0.1 is ever listened on or connected to. Threads: one acceptor, two
pumps per connection; ``close()`` (or leaving the ``with``) stops them all.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType

HOST = "127.0.0.1"
_CHUNK = 65536


class FaultProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server((HOST, 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._mode = "pass"
        self._delay = 0.0
        self._sockets: set[socket.socket] = set()
        self._victim: socket.socket | None = None  # the muted client socket of lose_replies(once=True)
        self._closed = False
        self.accepted = 0
        self._acceptor = threading.Thread(target=self._accept_loop, name="faultproxy-accept", daemon=True)
        self._acceptor.start()

    # -- modes ----------------------------------------------------------------
    def passthrough(self) -> None:
        self._set("pass")

    def blackhole(self) -> None:
        self._set("blackhole")

    def lose_replies(self, once: bool = False) -> None:
        self._set("lose_one_connection" if once else "lose_replies")

    def delay(self, seconds: float) -> None:
        self._set("delay", seconds)

    def delay_replies(self, seconds: float) -> None:
        self._set("delay_replies", seconds)

    def drop(self) -> None:
        self._set("drop")
        with self._lock:
            doomed = list(self._sockets)
        for sock in doomed:
            self._close(sock)

    @property
    def mode(self) -> str:
        return self._mode

    def _set(self, mode: str, delay: float = 0.0) -> None:
        with self._lock:
            self._mode, self._delay, self._victim = mode, delay, None

    # -- lifecycle --------------------------------------------------------------
    def close(self) -> None:
        self._closed = True
        self._close(self._listener)
        with self._lock:
            doomed = list(self._sockets)
        for sock in doomed:
            self._close(sock)
        self._acceptor.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.accepted += 1
            if self._mode == "drop":
                self._close(client)
                continue
            try:
                server = socket.create_connection((HOST, self.target_port), timeout=5)
                server.settimeout(None)
            except OSError:
                self._close(client)  # the target is down: the client sees a closed link
                continue
            with self._lock:
                self._sockets.update((client, server))
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst, dst is server),
                                 name="faultproxy-pump", daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        """Copy src to dst until either closes, applying the mode to each chunk.
        ``dst`` is the client socket when ``upstream`` is false."""
        while True:
            try:
                data = src.recv(_CHUNK)
            except OSError:
                data = b""
            if not data:
                # A black hole hides the close, as it hides everything else.
                if not self._swallows(upstream, dst):
                    self._close(dst)
                return
            if self._swallows(upstream, dst):
                continue
            if self._mode == "delay" or (self._mode == "delay_replies" and not upstream):
                time.sleep(self._delay)
            try:
                dst.sendall(data)
            except OSError:
                self._close(src)
                return

    def _swallows(self, upstream: bool, dst: socket.socket) -> bool:
        mode = self._mode
        if mode == "blackhole":
            return True
        if upstream:
            return False
        if mode == "lose_one_connection":
            with self._lock:
                self._victim = self._victim or dst
                return self._victim is dst
        return mode == "lose_replies"

    def _close(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)
        # shutdown wakes a pump blocked in recv; it fails on a socket the
        # other side already closed, which is just as good.
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
