"""A holder SIGKILLed mid-lease: after expiry another process gets the lease
and the item with a higher token and the next attempt number, and the
semaphore place the holder's permit held."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

import onceonly
from tests.onceonly.concurrency import store_workers
from tests.support.races.race import CTX, read_histories

pytestmark = pytest.mark.concurrency
TTL = 1.5


def test_killed_holder_is_reclaimed_after_expiry(store_url: str, unique: str, tmp_path: Path) -> None:
    store = onceonly.connect(store_url)
    store.setup()
    queue = store.queue(unique)
    queue.put("the-job", payload={"n": 1})

    barrier = CTX.Barrier(1)
    holder = CTX.Process(
        target=store_workers.hold_and_hang,
        args=(0, barrier, tmp_path / "holder.jsonl", store_url, unique, unique, TTL),
    )
    holder.start()
    deadline = time.monotonic() + 60
    while not read_histories(tmp_path) and time.monotonic() < deadline:
        assert holder.is_alive(), "the holder died before taking its lease"
        time.sleep(0.05)
    (held,) = read_histories(tmp_path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.join()
    assert holder.exitcode == -signal.SIGKILL

    assert time.time() < held["permit_expires_at"] - 0.2, "too slow to see the dead holder's permit still held"
    assert store.take_permit(unique, 1, ttl=30) is None  # the dead holder's permit holds the one place

    time.sleep(TTL + 0.5)
    permit = store.take_permit(unique, 1, ttl=30)  # its ttl ended: the place freed itself
    assert permit is not None and store.return_permit(permit) is True
    lease = store.acquire(unique, ttl=30)
    claims = queue.claim(limit=5, lease=30)
    assert lease is not None and lease.token > held["lease_token"] and lease.grant_number == 2
    assert [c.item_id for c in claims] == ["the-job"]
    assert claims[0].token > held["claim_token"]
    assert claims[0].attempt == held["attempt"] + 1 == 2
    assert claims[0].payload == {"n": 1}
    assert queue.ack(claims[0]) is True
    store.close()
