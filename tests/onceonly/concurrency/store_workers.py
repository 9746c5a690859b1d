"""Worker bodies for the store races (run in spawned processes)."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import onceonly
from tests.support.races.race import BARRIER_TIMEOUT, PING, History


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


def hold_permits(n: int, barrier: Any, path: Path, url: str, name: str, limit: int, rounds: int,
                 ttl: float, abandon: float) -> None:
    """Take a permit of one semaphore, hold it a moment, return it, many times;
    record each holding (from after the take returned to before the return was
    sent) and each take that found the semaphore full. A share ``abandon`` of
    the permits is never returned, as by a holder that crashed: held until its
    ttl ends (recorded up to 5 ms before its expiry), then its place must free."""
    history = History(path)
    store = _start(barrier, url)
    rng = random.Random(n)
    for _ in range(rounds):
        permit = store.take_permit(name, limit, ttl=ttl)
        if permit is None:
            history.write(event="full", worker=n, at=time.time())
            time.sleep(rng.uniform(0, 0.003))
            continue
        start = time.time()
        if rng.random() < abandon:
            history.write(event="held", worker=n, holder=permit.holder, start=start, end=permit.expires_at - 0.005,
                          returned=None)
            continue
        time.sleep(rng.uniform(0.002, 0.01))
        end = time.time()
        returned = store.return_permit(permit)
        history.write(event="held", worker=n, holder=permit.holder, start=start, end=end, returned=returned)
    store.close()
    history.close()


def hold_permit_sets(n: int, barrier: Any, path: Path, url: str, names: list[str], limit: int,
                     rounds: int) -> None:
    """Take permits of several semaphores in one take_permits call (the names
    shuffled, one sometimes asked for twice), hold them a moment, return
    them in one return_permits call (shuffled again); record each holding by
    name and each want that found its semaphore full."""
    history = History(path)
    store = _start(barrier, url)
    rng = random.Random(n)
    for _ in range(rounds):
        wanted = rng.sample(names, len(names)) + ([rng.choice(names)] if rng.random() < 0.3 else [])
        permits = store.take_permits([(name, limit) for name in wanted], ttl=30)
        start = time.time()
        for name, permit in zip(wanted, permits, strict=True):
            if permit is None:
                history.write(event="full", worker=n, name=name, at=start)
            else:
                assert permit.name == name
        time.sleep(rng.uniform(0.002, 0.01))
        end = time.time()
        taken = [permit for permit in permits if permit is not None]
        rng.shuffle(taken)  # given back in one return_permits call, in an order of its own
        for permit, returned in zip(taken, store.return_permits(taken), strict=True):
            history.write(event="held", worker=n, name=permit.name, holder=permit.holder, start=start, end=end,
                          returned=returned)
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
    """Take a lease, a queue item and the one permit of a semaphore (limit 1,
    named as the lease), record them, then hang until SIGKILLed."""
    history = History(path)
    store = _start(barrier, url)
    lease = store.acquire(lease_name, ttl=ttl)
    (claim,) = store.queue(queue).claim(limit=1, lease=ttl)
    permit = store.take_permit(lease_name, 1, ttl=ttl)
    assert lease is not None and permit is not None
    history.write(lease_token=lease.token, claim_token=claim.token, attempt=claim.attempt,
                  permit_expires_at=permit.expires_at)
    while True:  # mid-lease: the test kills us here
        time.sleep(1)
