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

from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def run_in_lanes(items: Sequence[T], lane_of: Callable[[T], Hashable], work: Callable[[T], R],
                 max_in_flight: int) -> list[Future[R]]:
    """Start ``work(item)`` for every item and return one Future per item, in
    ``items``' order; returns once every item has finished. ``work`` must not
    raise BaseException other than Exception (it would end its lane's worker)."""
    futures: list[Future[R]] = [Future() for _ in items]
    lanes: dict[Hashable, list[int]] = {}
    for index, item in enumerate(items):
        lanes.setdefault(lane_of(item), []).append(index)

    def run_lane(indexes: list[int]) -> None:
        for index in indexes:  # in batch order: the next one starts when this one has finished
            future = futures[index]
            future.set_running_or_notify_cancel()
            try:
                future.set_result(work(items[index]))
            except Exception as exc:  # noqa: BLE001 - the item's own outcome, read by its caller
                future.set_exception(exc)

    workers = max(1, min(max_in_flight, len(lanes)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="delivery") as pool:
        # Lanes start in the order of their first item; the `with` waits for all.
        for lane_done in [pool.submit(run_lane, indexes) for indexes in lanes.values()]:
            lane_done.result()  # run_lane itself never raises; a bug in it must not pass silently
    return futures
