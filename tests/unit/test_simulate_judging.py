"""How simulate judges a cron tick and decides that it stops waiting."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from onceonly_cli.simulate.drain import DrainWatch
from onceonly_cli.simulate.report import TickFacts


def tick(completed: bool, **statuses: int) -> TickFacts:
    return TickFacts("overdue-invoices", "2040-01-01T02:00:00Z", sum(statuses.values()), Counter(statuses),
                     completed=completed)


@pytest.mark.parametrize(("facts", "ok"), [
    (tick(True, ran=1, skipped=3), True),
    # The run finished the tick, completed its lock, and was killed before answering.
    (tick(True, crashed=1, skipped=3), True),
    (tick(True, ran=2, skipped=2), False),
    (tick(True, ran=1, superseded=1, skipped=2), False),
    (tick(False, crashed=1, skipped=3), False),  # nobody finished it
    (tick(False, ran=1, skipped=3), False),  # "ran" but the lock says otherwise
    (tick(True, skipped=4), False),  # completed, yet no run of ours can have done it
])
def test_a_tick_ran_once_only_with_one_finished_run(facts: TickFacts, ok: bool) -> None:
    assert facts.ran_once() is ok


def test_the_drain_waits_while_work_progresses_and_stops_when_it_stalls() -> None:
    watch = DrainWatch(stall_limit=0.2, time_limit=60)
    for step in range(6):  # progress every 0.1 s: longer than the stall limit in total
        assert not watch.observe(step, finished=False)
        time.sleep(0.1)
    assert not watch.observe(5, finished=False)
    time.sleep(0.25)
    assert watch.observe(5, finished=False)
    assert watch.reason == "stalled" and not watch.drained


def test_the_drain_stops_at_the_time_limit_even_while_progressing() -> None:
    watch = DrainWatch(stall_limit=10, time_limit=0.2)
    step = 0
    while not watch.observe(step, finished=False):
        step += 1
        time.sleep(0.02)
    assert watch.reason == "time limit" and "progressing" in watch.detail()


def test_finished_work_ends_the_wait_as_drained() -> None:
    watch = DrainWatch(stall_limit=10, time_limit=60)
    assert watch.observe(1, finished=True) and watch.drained
