"""Worker bodies for the races on a Redis Cluster whose topology changes under
them (run in spawned processes). A call that fails with StoreUnavailableError
is part of the run (a node died, a redirect outlasted the timeout): it is
recorded, with what it leaves unknown, and the worker carries on."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import onceonly
from tests.onceonly.concurrency.store_workers import _start
from tests.support.races.race import History


def drain_through_changes(
    n: int, barrier: Any, path: Path, url: str, queue: str, lease: float, seconds: float, done: str,
) -> None:
    """A worker loop (``claim(acks=…)``, batches of 5) until the queue is empty
    once the file ``done`` exists (or ``seconds`` after the start line).
    Workers 0 and 1 each keep one claim of their first batch back and ack it
    only at the end, when the queue is empty: by then its lease ran out and
    another grant was acked, so every run has a stale ack to refuse, whatever
    the change's outage did to the random stalls' acks."""
    history = History(path)
    store = _start(barrier, url)
    deadline = time.time() + seconds
    q = store.queue(queue)
    rng = random.Random(n)
    pending: list[onceonly.Claim] = []
    kept_back: list[onceonly.Claim] = []
    while time.time() < deadline:
        try:
            claims = q.claim(limit=5, lease=lease, acks=pending)
        except onceonly.StoreUnavailableError as exc:
            # the acks and the grants may or may not have been applied
            for claim in pending:
                history.write(event="ack_unknown", worker=n, item=claim.item_id, token=claim.token)
            history.write(event="error", worker=n, op="claim", error=str(exc)[:200])
            pending = []
            time.sleep(0.05)
            continue
        for claim, ok in zip(pending, claims.acked, strict=True):
            history.write(event="ack", worker=n, item=claim.item_id, token=claim.token, ok=ok)
        pending = list(claims)
        for claim in claims:
            history.write(event="claim", worker=n, item=claim.item_id, token=claim.token,
                          granted_at=claim.lease_expires_at - lease, expires=claim.lease_expires_at)
        if n < 2 and pending and not kept_back:
            kept_back.append(pending.pop())
        if not claims:
            try:
                if q.depth().total == 0 and Path(done).exists():
                    break
            except onceonly.StoreUnavailableError:
                pass
            time.sleep(0.05)
        elif rng.random() < 0.1:
            time.sleep(lease * 1.5)  # a stall: the lease runs out, another worker reclaims, this ack is stale
    for last in (pending, kept_back):
        try:
            for claim, ok in zip(last, q.ack_many(last), strict=True):
                history.write(event="ack", worker=n, item=claim.item_id, token=claim.token, ok=ok)
        except onceonly.StoreUnavailableError:
            for claim in last:
                history.write(event="ack_unknown", worker=n, item=claim.item_id, token=claim.token)
    store.close()
    history.close()


def hold_names_through_changes(
    n: int, barrier: Any, path: Path, url: str, names: list[str], ttl: float, after: float, done: str,
    seconds: float,
) -> None:
    """Acquire, hold a moment, release, over a few hot names, until ``after``
    seconds past the moment the file ``done`` exists (or ``seconds`` after the
    start line): every run has grants after the change, however long it took."""
    history = History(path)
    store = _start(barrier, url)
    deadline = time.time() + seconds
    rng = random.Random(n)
    while time.time() < deadline:
        if os.path.exists(done):
            deadline = min(deadline, os.path.getmtime(done) + after)
        name = rng.choice(names)
        try:
            lease = store.acquire(name, ttl=ttl)
        except onceonly.StoreUnavailableError as exc:
            history.write(event="error", worker=n, op="acquire", name=name, error=str(exc)[:200])
            continue
        if lease is None:
            history.write(event="contended", worker=n, name=name)
            time.sleep(rng.uniform(0, 0.005))
            continue
        start = time.time()
        time.sleep(rng.uniform(0, 0.01))
        end = time.time()
        try:
            released: bool | None = store.release(lease)
        except onceonly.StoreUnavailableError:
            released = None  # unknown: held by nobody until its ttl runs out
        history.write(event="held", worker=n, name=name, token=lease.token, start=start, end=end,
                      released=released)
    store.close()
    history.close()
