"""`onceonly selftest`'s race, as a Python API: several processes hammer one
store (hot lease names, one due queue) for a bounded time, each recording an
operation history; the history checker (history.py) then judges the run.

Workers stall past their lease now and then, so that others take the lease or
reclaim the item and the stalled worker's release/ack becomes a stale write the
store must refuse. Every name the run uses starts with ``plan.prefix``."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onceonly

from ..testing.history import HistoryWriter, Summary, read, summarize
from .selftest_worker import Plan, ack_batch, claim_batch, work

StoreFactory = Callable[[], onceonly.Store]  # picklable (it is sent to spawned workers)
DRAIN_BATCH = 100
DRAIN_LEASE = 30.0
JOIN_MARGIN = 60.0  # past the run's seconds: a worker still running then is stuck


@dataclass
class SelftestResult:
    summary: Summary
    plan: Plan
    winners: int  # workers that were granted something: fewer than two did not race
    contended: int  # acquires refused because another worker held the name
    stuck: list[str]  # workers that crashed or did not finish
    elapsed: float
    history: Path

    @property
    def passed(self) -> bool:
        return self.summary.ok and self.winners >= 2 and not self.stuck


def run_selftest(store_factory: StoreFactory, plan: Plan, history: Path) -> SelftestResult:
    """Seed the queue, race ``plan.procs`` worker processes for ``plan.seconds``,
    drain what is left, and check the recorded history."""
    started = time.time()
    store = store_factory()
    try:
        _seed(store, plan, history)
        stuck = _race(store_factory, plan, history)
        _drain(store, plan, history)
    finally:
        store.close()
    events = read(history)
    winners = {e["worker"] for e in events if e["event"] == "ok" and e["op"] in ("acquire", "claim")}
    contended = sum(1 for e in events if e["event"] == "fail" and e["op"] == "acquire" and not e["extra"])
    return SelftestResult(summarize(events), plan, len(winners - {"drain"}), contended, stuck,
                          time.time() - started, history)


def _seed(store: onceonly.Store, plan: Plan, history: Path) -> None:
    """Put the items, due one after another over the first half of the run:
    the workers keep meeting at the head of the queue, often with nothing due
    but items in flight (where a store that hands those out gets caught)."""
    queue = store.queue(plan.queue_name)
    start, step = time.time(), plan.seconds / 2 / plan.items
    with HistoryWriter(history, "seed") as writer:
        for i, item_id in enumerate(plan.item_ids):
            op = writer.invoke("put", item_id)
            queue.put(item_id, due_at=start + i * step, payload={"selftest": item_id})
            op.ok()


def _race(store_factory: StoreFactory, plan: Plan, history: Path) -> list[str]:
    ctx = multiprocessing.get_context("spawn")  # no inherited sockets or pool threads
    barrier = ctx.Barrier(plan.procs)
    procs = [ctx.Process(target=work, args=(n, barrier, store_factory, plan, history), daemon=True)
             for n in range(plan.procs)]
    for proc in procs:
        proc.start()
    deadline = time.time() + plan.seconds + JOIN_MARGIN
    for proc in procs:
        proc.join(max(0.0, deadline - time.time()))
    stuck = []
    for n, proc in enumerate(procs):
        if proc.is_alive():
            proc.kill()
            proc.join()
            stuck.append(f"worker w{n} did not finish")
        elif proc.exitcode != 0:
            stuck.append(f"worker w{n} exited with code {proc.exitcode}")
    return stuck


def _drain(store: onceonly.Store, plan: Plan, history: Path) -> None:
    """Finish what the workers left (the run's time ran out, or a stalled
    worker's lease has yet to run out): every item put must end up acked."""
    queue = store.queue(plan.queue_name)
    give_up = time.time() + plan.lease * 3 + DRAIN_LEASE
    with HistoryWriter(history, "drain") as writer:
        while queue.depth().total and time.time() < give_up:
            claims = claim_batch(writer, queue, DRAIN_BATCH, DRAIN_LEASE)
            if claims:
                ack_batch(writer, queue, claims)
            else:
                time.sleep(0.2)  # in flight under a lease that has not run out yet
