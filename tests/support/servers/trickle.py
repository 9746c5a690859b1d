"""A TCP proxy on 127.0.0.1 that passes the client's bytes on at once and the
server's bytes back one at a time, ``gap`` seconds apart: it slows down any
phase of a request it carries (a TLS handshake included) without breaking it."""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class TrickleProxy:
    def __init__(self, upstream_port: int, gap: float) -> None:
        self.upstream_port, self.gap = upstream_port, gap
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()

    def __enter__(self) -> TrickleProxy:
        threading.Thread(target=self._accept, daemon=True, name="trickle-accept").start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            self.connections += 1
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            threading.Thread(target=self._pipe, args=(client, upstream, 0.0), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, self.gap), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, gap: float) -> None:
        with contextlib.suppress(OSError):
            while not self._stop.is_set():
                data = source.recv(4096)
                if not data:
                    break
                if not gap:
                    sink.sendall(data)
                    continue
                for i in range(len(data)):
                    if self._stop.is_set():
                        break  # a closed proxy stops dribbling at once
                    sink.sendall(data[i:i + 1])
                    time.sleep(gap)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
