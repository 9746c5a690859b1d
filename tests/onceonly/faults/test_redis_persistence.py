"""What a Redis restart keeps, with and without persistence: the claims that
docs/reliability.md ("Redis without persistence") makes, one by one."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

import onceonly
from tests.support.servers.restartable_servers import RedisServer


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
        bumped_tokens = []
        for _ in range(3):
            lease = store.acquire("bumped", ttl=600)
            assert lease is not None and store.release(lease)
            bumped_tokens.append(lease.token)
        assert bumped_tokens == sorted(set(bumped_tokens))
        store.close()

        store = _restart_with(server)
        queue, depth = store.queue("q"), store.queue("q").depth()
        again = store.acquire("held", ttl=600)
        redone = store.acquire("done", ttl=600)
        bumped = store.acquire("bumped", ttl=600)
        if appendonly:
            assert (depth.due, depth.scheduled, depth.in_flight) == (2, 1, 1)
            assert again is None and redone is None, "a held or completed lease was granted again"
            assert bumped is not None and bumped.token > lease.token
            assert queue.ack(claim) and store.release(held)
        else:
            # Everything is gone: items due, scheduled and in flight...
            assert (depth.due, depth.scheduled, depth.in_flight) == (0, 0, 0)
            # ...a lease still held is granted again (a double grant), a completed one runs again...
            assert again is not None and redone is not None
            # ...but no token is handed out again: the server's clock floors them.
            assert again.token > held.token and redone.token > done.token
            assert bumped is not None and bumped.token > lease.token
            # The old holders' writes are still refused: owner and token are checked together.
            assert not queue.ack(claim) and not store.release(held)
        store.close()
    finally:
        server.kill()


def test_a_restart_from_an_older_snapshot_never_repeats_a_token(tmp_path: Path) -> None:
    """The server comes back from a snapshot taken before the last grants: the
    records say token 2 (lease) and the first claim (item), while a holder
    still runs with a later token of each. The next grants are above what the
    live holders have, so their fenced writes are not refused in favour of a
    lower token, and the stale holders' own writes to the store are refused."""
    server = RedisServer(tmp_path, appendonly=False)
    server.start()
    try:
        store = onceonly.connect(f"{server.url}?timeout=2")
        queue = store.queue("q")
        queue.put("item", due_at=0)
        for _ in range(2):
            lease = store.acquire("job", ttl=600)
            assert lease is not None and store.release(lease)
        (first_claim,) = queue.claim(limit=1, lease=600)
        assert queue.retry(first_claim, due_at=0)
        with redis.Redis(host="127.0.0.1", port=server.port) as client:
            client.save()  # the snapshot the server will come back from
        for _ in range(3):
            lease = store.acquire("job", ttl=600)
            assert lease is not None and store.release(lease)
        live = store.acquire("job", ttl=600)
        (live_claim,) = queue.claim(limit=1, lease=600)
        assert live is not None and live.token > lease.token and live_claim.token > first_claim.token
        store.close()

        store = _restart_with(server)
        queue = store.queue("q")
        again = store.acquire("job", ttl=600)  # the snapshot says released: granted again
        (claim_again,) = queue.claim(limit=1, lease=600)  # the snapshot says waiting
        assert again is not None and again.token > live.token
        assert claim_again.token > live_claim.token
        with pytest.raises(onceonly.LeaseLostError):
            store.renew(live, ttl=600)
        assert not queue.ack(live_claim)
        assert queue.ack(claim_again) and store.release(again)
        store.close()
    finally:
        server.kill()
