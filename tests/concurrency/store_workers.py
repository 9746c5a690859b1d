"""Worker bodies for the store races (run in spawned processes)."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import onceonly

from .race import BARRIER_TIMEOUT, PING, History


def _start(barrier: Any, url: str) -> onceonly.Store:
    store = onceonly.connect(url)  # own connection, opened after start...
    store.inspect(PING)  # ...and really open (one round trip) before the race starts
    barrier.wait(timeout=BARRIER_TIMEOUT)
    return store


def acquire_each_once(n: int, barrier: Any, path: Path, url: str, names: list[str]) -> None:
    """Every worker tries every name once, in its own order, with a long ttl."""
    history = History(path)
    store = _start(barrier, url)
    order = names[:]
    random.Random(n).shuffle(order)
    for name in order:
        lease = store.acquire(name, ttl=60)
        if lease is not None:
            history.write(worker=n, name=name, token=lease.token, grant=lease.grant_number, owner=lease.owner)
    store.close()
    history.close()


def hold_hot_names(n: int, barrier: Any, path: Path, url: str, names: list[str], rounds: int) -> None:
    """Acquire/hold/release a few hot names many times; record each holding, and
    each acquire that found the name held (the proof that workers overlapped)."""
    history = History(path)
    store = _start(barrier, url)
    rng = random.Random(n)
    for _ in range(rounds):
        name = rng.choice(names)
        lease = store.acquire(name, ttl=30)
        if lease is None:
            history.write(event="contended", worker=n, name=name)
            continue
        start = time.time()
        time.sleep(rng.uniform(0, 0.01))
        end = time.time()
        released = store.release(lease)
        history.write(event="held", worker=n, name=lease.name, token=lease.token, start=start, end=end,
                      released=released)
    store.close()
    history.close()


def drain_queue(n: int, barrier: Any, path: Path, url: str, queue: str, batch: int) -> None:
    """Claim batches until the queue stays empty, ack each batch at once."""
    history = History(path)
    store = _start(barrier, url)
    q = store.queue(queue)
    empty_in_a_row = 0
    while empty_in_a_row < 3:
        claims = q.claim(limit=batch, lease=60)
        if not claims:
            empty_in_a_row += 1
            time.sleep(0.05)
            continue
        empty_in_a_row = 0
        for claim in claims:
            history.write(event="claim", worker=n, item=claim.item_id, token=claim.token)
        for claim, acked in zip(claims, q.ack_many(claims), strict=True):
            history.write(event="ack", worker=n, item=claim.item_id, token=claim.token, ok=acked)
    store.close()
    history.close()


def work_with_stalls(
    n: int, barrier: Any, path: Path, url: str, queue: str, lease: float, deadline: float,
    ack_in_next_claim: bool = False,
) -> None:
    """Claim with a short lease; sometimes stall past it before acking, so
    that others reclaim the item and this worker's ack becomes stale. The acks
    go one by one, or with the next claim (``acks=``, a worker loop)."""
    history = History(path)
    store = _start(barrier, url)
    q = store.queue(queue)
    rng = random.Random(n)
    pending: list[onceonly.Claim] = []
    while time.time() < deadline:
        claims = q.claim(limit=3, lease=lease, acks=pending)
        _record_acks(history, n, pending, claims.acked)
        pending = []
        if not claims:
            if q.depth().total == 0:
                break
            time.sleep(0.05)
            continue
        for claim in claims:
            history.write(event="claim", worker=n, item=claim.item_id, token=claim.token, attempt=claim.attempt)
        if rng.random() < 0.3:
            time.sleep(lease * 2.5)  # a pause: the lease runs out meanwhile
        if ack_in_next_claim:
            pending = list(claims)
        else:
            _record_acks(history, n, claims, [q.ack(claim) for claim in claims])
    _record_acks(history, n, pending, q.ack_many(pending))
    store.close()
    history.close()


def _record_acks(history: History, n: int, claims: list[onceonly.Claim], results: list[bool]) -> None:
    for claim, ok in zip(claims, results, strict=True):
        history.write(event="ack", worker=n, item=claim.item_id, token=claim.token, ok=ok)


def hold_and_hang(n: int, barrier: Any, path: Path, url: str, lease_name: str, queue: str, ttl: float) -> None:
    """Take a lease and a queue item, record them, then hang until SIGKILLed."""
    history = History(path)
    store = _start(barrier, url)
    lease = store.acquire(lease_name, ttl=ttl)
    (claim,) = store.queue(queue).claim(limit=1, lease=ttl)
    assert lease is not None
    history.write(lease_token=lease.token, claim_token=claim.token, attempt=claim.attempt)
    while True:  # mid-lease: the test kills us here
        time.sleep(1)
