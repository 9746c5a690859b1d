"""One `onceonly selftest` worker process (spawned), and the recorded store
calls it shares with the drain: every call is an invoke line before and an
ok/fail line after it in the history."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import onceonly
from onceonly import Claim, Queue

from ..testing.history import HistoryWriter, Op

BARRIER_TIMEOUT = 120.0
CLAIM_BATCH = 5
STALL_CHANCE = 0.15  # a worker pauses past its lease: its release/ack is then stale if someone took over
RETRY_CHANCE = 0.1
LEASE_SHARE = 0.3  # rounds on hot lease names; the rest work the queue
WORK_SECONDS = 0.02  # at most, per claimed batch
_T = TypeVar("_T")


@dataclass(frozen=True)
class Plan:
    prefix: str  # every lease name, queue name and item id of the run starts with it
    procs: int
    items: int
    seconds: float
    lease: float = 1.0  # ttl of leases and claims: short, so that stalls outlast it

    @property
    def queue_name(self) -> str:
        return f"{self.prefix}-queue"

    @property
    def lease_names(self) -> list[str]:
        return [f"{self.prefix}-lease-{k}" for k in range(max(2, self.procs // 2))]

    @property
    def item_ids(self) -> list[str]:
        return [f"{self.prefix}-item-{i}" for i in range(self.items)]


def record(op: Op, call: Callable[[], _T]) -> _T | None:
    """``call()``; a lost lease is recorded as a refusal, another store error as
    an unknown outcome (it may have been applied), and both return None."""
    try:
        return call()
    except onceonly.LeaseLostError:
        op.fail()
    except onceonly.OnceOnlyError as exc:
        op.error(exc)
    return None


def claim_batch(writer: HistoryWriter, queue: Queue, limit: int, lease: float) -> list[Claim]:
    op = writer.invoke("claim", queue.name, lease=lease)
    claims = record(op, lambda: queue.claim(limit=limit, lease=lease))
    if claims == []:
        op.fail()
    for claim in claims or []:
        op.ok(name=claim.item_id, token=claim.token)
    return claims or []


def ack_batch(writer: HistoryWriter, queue: Queue, claims: Sequence[Claim]) -> None:
    acks = [writer.invoke("ack", c.item_id, token=c.token) for c in claims]
    try:
        results = queue.ack_many(claims)
    except onceonly.OnceOnlyError as exc:
        for ack in acks:
            ack.error(exc)
        return
    for ack, ok in zip(acks, results, strict=True):
        ack.ok() if ok else ack.fail()


def work(n: int, barrier: Any, store_factory: Callable[[], onceonly.Store], plan: Plan, history: Path) -> None:
    store = store_factory()  # own connections, opened after start...
    store.inspect(plan.lease_names[0])  # ...and really open (one round trip) before the race
    barrier.wait(timeout=BARRIER_TIMEOUT)
    deadline = time.time() + plan.seconds
    rng = random.Random()
    queue = store.queue(plan.queue_name)
    with HistoryWriter(history, f"w{n}") as writer:
        while time.time() < deadline:
            if rng.random() < LEASE_SHARE:
                _lease_round(store, writer, rng, plan)
            elif not _queue_round(queue, writer, rng, plan):
                break
    store.close()


def _stall(rng: random.Random, plan: Plan) -> None:
    if rng.random() < STALL_CHANCE:
        time.sleep(plan.lease * 1.5)


def _lease_round(store: onceonly.Store, writer: HistoryWriter, rng: random.Random, plan: Plan) -> None:
    name = rng.choice(plan.lease_names)
    op = writer.invoke("acquire", name, ttl=plan.lease)
    lease = record(op, lambda: store.acquire(name, ttl=plan.lease))
    if lease is None:
        op.fail()
        return
    op.ok(token=lease.token)
    _stall(rng, plan)
    renew = writer.invoke("renew", name, token=lease.token, ttl=plan.lease)
    if record(renew, lambda: store.renew(lease, ttl=plan.lease)) is not None:
        renew.ok()
    _stall(rng, plan)
    what = rng.choice(["release", "complete"])
    end = writer.invoke(what, name, token=lease.token)
    if what == "release":
        done = record(end, lambda: store.release(lease))
    else:  # a short keep: the name is free again soon, for the next rounds
        done = record(end, lambda: store.complete(lease, keep=plan.lease / 10))
    if done is not None:
        end.ok() if done else end.fail()


def _queue_round(queue: Queue, writer: HistoryWriter, rng: random.Random, plan: Plan) -> bool:
    """One claim, work and ack; False once the queue is empty."""
    claims = claim_batch(writer, queue, CLAIM_BATCH, plan.lease)
    if not claims:
        try:
            if not queue.depth().total:
                return False
        except onceonly.OnceOnlyError:
            pass  # a store hiccup is the claims' business (recorded there), not a reason to stop
        time.sleep(0.05)  # the rest is not due yet or in flight: it comes back if its holder stalls
        return True
    time.sleep(rng.uniform(0, WORK_SECONDS))  # the work: holds last a while, as real ones do
    _stall(rng, plan)
    if rng.random() < RETRY_CHANCE:
        first, claims = claims[0], claims[1:]
        op = writer.invoke("retry", first.item_id, token=first.token)
        done = record(op, lambda: queue.retry(first, due_at=time.time()))
        if done is not None:
            op.ok() if done else op.fail()
    if claims:
        ack_batch(writer, queue, claims)
    return True
