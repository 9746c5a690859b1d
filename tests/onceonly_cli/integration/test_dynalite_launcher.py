"""dynalite 4.0.0 ends its whole process when a client dies mid-request
(``req.on('error', e => { throw e })``: "Error: aborted"), which took every later
DynamoDB test down with it. LocalServers starts it through
cli/src/onceonly_cli/testing/dynalite_launcher.js, which keeps serving.

The client is a child process that sends the headers and part of the body of a
large BatchWriteItem and is SIGKILLed while the server waits for the rest: a
request cut off mid-body, every time. The first test shows that this kill ends
plain dynalite, so the second one proves something."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import onceonly
from onceonly_cli.testing.servers import LocalServers, free_port
from tests.support import REPO_ROOT

KILLS = 3
# Headers of a 2 MB BatchWriteItem, and its first 256 KB; the rest never comes.
CLIENT = """
import socket, sys, time
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
sock.sendall(b"POST / HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nContent-Type: application/x-amz-json-1.0\\r\\n"
             b"X-Amz-Target: DynamoDB_20120810.BatchWriteItem\\r\\nContent-Length: 2000000\\r\\n\\r\\n"
             + b'{"RequestItems": {"t": [' + b" " * 256_000)
print("sent", flush=True)
time.sleep(600)
"""


def kill_mid_request(port: int) -> None:
    client = subprocess.Popen([sys.executable, "-c", CLIENT, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout is not None and client.stdout.readline().strip() == "sent"
        client.send_signal(signal.SIGKILL)
        assert client.wait(timeout=30) == -signal.SIGKILL
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()


def wait_for(condition, timeout: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def round_trip(endpoint: str, name: str) -> onceonly.Lease | None:
    store = onceonly.connect(f"dynamodb://launcher-test?region=us-east-1&endpoint_url={endpoint}")
    try:
        store.setup()
        return store.acquire(name, ttl=30)
    finally:
        store.close()


@pytest.fixture
def servers() -> Iterator[LocalServers]:
    started = LocalServers()
    yield started
    started.stop()


def test_plain_dynalite_dies_of_a_client_killed_mid_request(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "dynalite.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [str(REPO_ROOT / "node_modules" / ".bin" / "dynalite"), "--host", "127.0.0.1", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT)
    try:
        assert wait_for(lambda: "listening" in log.read_text()), log.read_text()
        kill_mid_request(port)
        assert wait_for(lambda: server.poll() is not None), "plain dynalite survived: is the launcher still needed?"
        assert "aborted" in log.read_text()
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()


def test_launcher_keeps_serving_after_clients_die_mid_request(servers: LocalServers) -> None:
    endpoint = servers.dynalite()
    port = int(endpoint.rsplit(":", 1)[1])
    log = servers.logs[endpoint]
    (server,) = servers.processes
    assert round_trip(endpoint, "before") is not None
    for kill in range(1, KILLS + 1):
        kill_mid_request(port)
        # The server saw each cut-off request (so the kill did land mid-request)...
        assert wait_for(lambda kill=kill: log.read_text().count("Error: aborted") >= kill), log.read_text()
        # ...and still runs and answers.
        assert server.poll() is None, log.read_text()
        assert round_trip(endpoint, f"after-{kill}") is not None
