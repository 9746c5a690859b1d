"""The test FaultProxy does what each mode promises, against a tiny echo server
that records what reached it."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from tests.support.servers.faultproxy import FaultProxy

SILENCE = 0.3  # how long "nothing arrives" is waited for


class EchoServer:
    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.received: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(1024):
                self.received.append(data)
                conn.sendall(data)


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.listener.close()


@pytest.fixture
def proxy(echo: EchoServer) -> Iterator[FaultProxy]:
    with FaultProxy(echo.port) as p:
        yield p


def connect(proxy: FaultProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=5)


def roundtrip(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    return sock.recv(1024)


def unanswered(sock: socket.socket, data: bytes) -> None:
    """``data`` gets no reply (within SILENCE seconds)."""
    sock.settimeout(SILENCE)
    with pytest.raises(TimeoutError):
        roundtrip(sock, data)
    sock.settimeout(5)


def test_passthrough_forwards_both_ways(proxy: FaultProxy, echo: EchoServer) -> None:
    with connect(proxy) as sock:
        assert roundtrip(sock, b"ping") == b"ping"
    assert echo.received == [b"ping"] and proxy.accepted == 1


def test_blackhole_swallows_requests_and_closes_nothing(proxy: FaultProxy, echo: EchoServer) -> None:
    with connect(proxy) as sock:
        assert roundtrip(sock, b"a") == b"a"
        proxy.blackhole()
        unanswered(sock, b"lost")
        with connect(proxy) as fresh:  # accepted, never answered
            unanswered(fresh, b"lost too")
    assert echo.received == [b"a"]


def test_lose_replies_lets_requests_through(proxy: FaultProxy, echo: EchoServer) -> None:
    proxy.lose_replies()
    with connect(proxy) as sock:
        unanswered(sock, b"applied")
    assert echo.received == [b"applied"]


def test_lose_replies_once_mutes_only_the_first_connection_answered(proxy: FaultProxy) -> None:
    proxy.lose_replies(once=True)
    with connect(proxy) as muted, connect(proxy) as other:
        unanswered(muted, b"first")
        assert roundtrip(other, b"second") == b"second"
        unanswered(muted, b"still muted")


def test_drop_closes_open_and_new_connections(proxy: FaultProxy) -> None:
    with connect(proxy) as sock:
        assert roundtrip(sock, b"a") == b"a"
        proxy.drop()
        assert sock.recv(1024) == b""
    with connect(proxy) as fresh:
        assert fresh.recv(1024) == b""
    proxy.passthrough()
    with connect(proxy) as again:
        assert roundtrip(again, b"back") == b"back"


def test_delay_still_delivers(proxy: FaultProxy) -> None:
    proxy.delay(0.05)
    with connect(proxy) as sock:
        assert roundtrip(sock, b"late") == b"late"
