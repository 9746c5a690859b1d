"""What a Redis restart keeps, with and without persistence: the claims that
docs/reliability.md ("Redis without persistence") makes, one by one."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import onceonly
from tests.support.restartable_servers import RedisServer


def _restart_with(server: RedisServer) -> onceonly.Store:
    server.restart(downtime=0.0)
    return onceonly.connect(f"{server.url}?timeout=2")


@pytest.mark.parametrize("appendonly", [False, True], ids=["persistence-off", "appendonly"])
def test_what_a_restart_forgets(appendonly: bool, tmp_path: Path) -> None:
    server = RedisServer(tmp_path, appendonly)
    server.start()
    try:
        store = onceonly.connect(f"{server.url}?timeout=2")
        queue = store.queue("q")
        for n in range(3):
            queue.put(f"due-{n}")
        queue.put("later", due_at=time.time() + 3600)
        (claim,) = queue.claim(limit=1, lease=600)
        held = store.acquire("held", ttl=600)
        done = store.acquire("done", ttl=600)
        assert held is not None and done is not None and store.complete(done, keep=3600)
        for _ in range(3):  # tokens 2..4 of "bumped"
            lease = store.acquire("bumped", ttl=600)
            assert lease is not None and store.release(lease)
        assert lease.token == 3
        store.close()

        store = _restart_with(server)
        queue, depth = store.queue("q"), store.queue("q").depth()
        again = store.acquire("held", ttl=600)
        redone = store.acquire("done", ttl=600)
        bumped = store.acquire("bumped", ttl=600)
        if appendonly:
            assert (depth.due, depth.scheduled, depth.in_flight) == (2, 1, 1)
            assert again is None and redone is None, "a held or completed lease was granted again"
            assert bumped is not None and bumped.token == 4
            assert queue.ack(claim) and store.release(held)
        else:
            # Everything is gone: items due, scheduled and in flight...
            assert (depth.due, depth.scheduled, depth.in_flight) == (0, 0, 0)
            # ...a lease still held is granted again (a double grant), a completed one runs again...
            assert again is not None and redone is not None
            # ...and tokens start again at 1: a token no longer tells later from earlier.
            assert (again.token, redone.token, bumped is not None and bumped.token) == (1, 1, 1)
            # The old holders' writes are still refused: owner and token are checked together.
            assert not queue.ack(claim) and not store.release(held)
        store.close()
    finally:
        server.kill()
