"""The pool's checkout check (pg_connection.check_on_checkout): no round trip
for a quiet connection; the empty-query check for one the server wrote to
(what it does before closing it) or that psycopg knows is closed."""

from __future__ import annotations

import os
import resource
import socket
from collections.abc import Iterator

import pytest

from onceonly.stores.postgres.connection import check_on_checkout

HIGH_FD = 1500  # above select()'s FD_SETSIZE (1024)


class FakeConnection:
    """What the check reads of a psycopg connection, over one end of a socket pair."""

    autocommit = True

    def __init__(self, fd: int, *, closed: bool = False) -> None:
        self._fd = fd
        self.closed = closed
        self.broken = False
        self.executed: list[str] = []

    def fileno(self) -> int:
        return self._fd

    def execute(self, query: str) -> None:
        self.executed.append(query)


@pytest.fixture
def link() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, server = socket.socketpair()
    yield ours, server
    ours.close()
    server.close()


def test_a_quiet_connection_costs_no_round_trip(link: tuple[socket.socket, socket.socket]) -> None:
    conn = FakeConnection(link[0].fileno())
    check_on_checkout(conn)  # type: ignore[arg-type]
    assert conn.executed == []


def test_a_connection_the_server_wrote_to_is_checked(link: tuple[socket.socket, socket.socket]) -> None:
    ours, server = link
    server.sendall(b"E")  # e.g. FATAL: terminating connection due to administrator command
    conn = FakeConnection(ours.fileno())
    check_on_checkout(conn)  # type: ignore[arg-type]
    assert conn.executed == [""]


def test_a_connection_the_server_closed_is_checked(link: tuple[socket.socket, socket.socket]) -> None:
    ours, server = link
    server.close()  # EOF is readable too
    conn = FakeConnection(ours.fileno())
    check_on_checkout(conn)  # type: ignore[arg-type]
    assert conn.executed == [""]


def test_a_closed_connection_is_checked(link: tuple[socket.socket, socket.socket]) -> None:
    conn = FakeConnection(link[0].fileno(), closed=True)
    check_on_checkout(conn)  # type: ignore[arg-type]
    assert conn.executed == [""]


def test_descriptors_above_1023(link: tuple[socket.socket, socket.socket]) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft <= HIGH_FD:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    ours, server = link
    os.dup2(ours.fileno(), HIGH_FD)
    try:
        server.sendall(b"E")
        conn = FakeConnection(HIGH_FD)
        check_on_checkout(conn)  # type: ignore[arg-type]
        assert conn.executed == [""]
    finally:
        os.close(HIGH_FD)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
