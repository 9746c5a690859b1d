"""Run the items of one batch concurrently, at most ``max_in_flight`` at once,
and the items of one lane one after another in batch order (a lane is one
subscription under WEBHOOK_SERIAL_PER_SUBSCRIPTION: a later delivery to it then
never overtakes an earlier one of the same batch; otherwise every item is a lane).

Each item gets its own Future: its result or its exception belongs to it alone
(the batch's partial-failure answer is read from them in batch order). Items
are threads' work, not processes': an attempt spends its time waiting on the
network, and the database connections are only held for each statement, never
across a request, so two pooled connections serve ten attempts in flight."""

from __future__ import annotations

import heapq
import os
import threading
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def _lanes(items: Sequence[T], lane_of: Callable[[T], Hashable]) -> list[list[int]]:
    """The items' indexes by lane, lanes in the order of their first item."""
    lanes: dict[Hashable, list[int]] = {}
    for index, item in enumerate(items):
        lanes.setdefault(lane_of(item), []).append(index)
    return list(lanes.values())


def latest_starts(items: Sequence[T], lane_of: Callable[[T], Hashable], max_in_flight: int,
                  each: float) -> list[float]:
    """When run_in_lanes would start each item at the latest (seconds from its
    start) if every item took ``each`` seconds: its lane waits for a free
    worker (lanes in order), then its items run one after another."""
    starts = [0.0] * len(items)
    lanes = _lanes(items, lane_of)
    free_at = [0.0] * max(1, min(max_in_flight, len(lanes)))  # a heap: when each worker is free
    for indexes in lanes:
        at = heapq.heappop(free_at)
        for index in indexes:
            starts[index], at = at, at + each
        heapq.heappush(free_at, at)
    return starts


def run_in_lanes(items: Sequence[T], lane_of: Callable[[T], Hashable], work: Callable[[T], R],
                 max_in_flight: int) -> list[Future[R]]:
    """Start ``work(item)`` for every item and return one Future per item, in
    ``items``' order; returns once every item has finished. ``work`` must not
    raise BaseException other than Exception (it would end its lane's worker)."""
    futures: list[Future[R]] = [Future() for _ in items]
    lanes = deque(_lanes(items, lane_of))
    taking = threading.Lock()

    def run_lanes() -> None:
        """One worker: the next lane not yet taken (in the order of their first
        item), all its items one after another, then the next lane."""
        while True:
            with taking:
                if not lanes:
                    return
                indexes = lanes.popleft()
            for index in indexes:  # in batch order: the next one starts when this one has finished
                future = futures[index]
                future.set_running_or_notify_cancel()
                try:
                    future.set_result(work(items[index]))
                except Exception as exc:  # noqa: BLE001 - the item's own outcome, read by its caller
                    future.set_exception(exc)

    workers = max(1, min(max_in_flight, len(lanes)))
    threads = _threads(workers)
    for worker in [threads.submit(run_lanes) for _ in range(workers)]:
        worker.result()  # run_lanes itself never raises; a bug in it must not pass silently
    return futures


def in_background(work: Callable[[], R]) -> Future[R]:
    """``work()`` on one of the kept threads; its Future."""
    return _threads(1).submit(work)


# The workers' threads are kept between batches (a warm container serves many):
# starting ten threads per batch cost more CPU than the batch's own statements.
# The pool holds at least THREADS, and at least the most workers one call asked
# for, so that concurrent callers in one process rarely wait for each other's
# threads; a forked child makes its own.
THREADS = 64
_pool: tuple[int, int, ThreadPoolExecutor] | None = None  # pid, size, pool
_pool_lock = threading.Lock()


def _threads(at_least: int) -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid() or _pool[1] < at_least:
            if _pool is not None and _pool[0] == os.getpid():
                _pool[2].shutdown(wait=False)  # its idle threads end; running work finishes
            size = max(THREADS, at_least)
            _pool = (os.getpid(), size, ThreadPoolExecutor(max_workers=size, thread_name_prefix="delivery"))
        return _pool[2]
