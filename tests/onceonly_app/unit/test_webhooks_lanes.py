"""run_in_lanes: at most max_in_flight items at once (also on threads kept
between calls, and beyond the kept pool's size), a lane's items one after
another in order, and each item's outcome its own."""

from __future__ import annotations

import threading
import time

import pytest

from onceonly_app.webhooks import lanes
from onceonly_app.webhooks.lanes import run_in_lanes


class Overlap:
    """Records how many items ran at once, and in which order each lane's ran.
    Each item waits (up to a second) until ``expected`` items run at once, so
    that a slow thread start on a loaded machine does not hide an overlap."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.changed = threading.Condition()
        self.running = self.peak = 0
        self.order: list[str] = []

    def work(self, item: str) -> str:
        with self.changed:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.order.append(item)
            self.changed.notify_all()
            self.changed.wait_for(lambda: self.peak >= self.expected, timeout=1.0)
        time.sleep(0.005)
        with self.changed:
            self.running -= 1
        if item.endswith("!"):
            raise ValueError(item)
        return item.upper()


@pytest.mark.parametrize(("max_in_flight", "items"), [(3, 12), (1, 5), (8, 4), (lanes.THREADS + 6, lanes.THREADS + 6)])
def test_at_most_max_in_flight_at_once(max_in_flight: int, items: int) -> None:
    for _ in range(2):  # the second call runs on the threads the first one left
        overlap = Overlap(min(max_in_flight, items))
        futures = run_in_lanes([f"i{n}" for n in range(items)], lambda item: item, overlap.work, max_in_flight)
        assert [f.result() for f in futures] == [f"I{n}" for n in range(items)]
        assert overlap.peak == min(max_in_flight, items)


def test_a_lane_runs_in_order_and_each_item_keeps_its_outcome() -> None:
    overlap = Overlap(2)
    items = ["a1", "b1", "a2!", "a3", "b2"]
    futures = run_in_lanes(items, lambda item: item[0], overlap.work, 10)
    assert [item for item in overlap.order if item.startswith("a")] == ["a1", "a2!", "a3"]
    assert overlap.peak == 2  # two lanes
    assert isinstance(futures[2].exception(), ValueError)
    assert [f.result() for n, f in enumerate(futures) if n != 2] == ["A1", "B1", "A3", "B2"]
