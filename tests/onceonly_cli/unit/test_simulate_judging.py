"""How simulate judges a cron tick and decides that it stops waiting."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from onceonly_cli.simulate.drain import DrainWatch
from onceonly_cli.simulate.report import DeliveryFacts, TickFacts, build_report


def tick(completed: bool, final_token: int | None, *runs: tuple[str, int], crashed: int = 0,
         skipped: int = 3) -> TickFacts:
    statuses = Counter({"skipped": skipped, "crashed": crashed})
    for status, _ in runs:
        statuses[status] += 1
    return TickFacts("overdue-invoices", "2040-01-01T02:00:00Z", sum(statuses.values()), +statuses,
                     completed=completed, final_token=final_token, tokens=list(runs))


@pytest.mark.parametrize(("facts", "ok"), [
    (tick(True, 1, ("ran", 1)), True),
    # The run finished the tick, completed its lock, and was killed before answering.
    (tick(True, 2, crashed=1), True),
    # A slow run lost its lease to a newer grant, which finished the tick: the fence at work.
    (tick(True, 2, ("superseded", 1), ("ran", 2)), True),
    (tick(True, 1, ("ran", 1), ("ran", 1)), False),
    # Superseded without any newer grant: two runs held the same grant.
    (tick(True, 1, ("ran", 1), ("superseded", 1)), False),
    (tick(True, 2, ("ran", 1)), False),  # "ran" with a grant that is not the newest
    (tick(False, 1, crashed=1), False),  # nobody finished it
    (tick(False, 1, ("ran", 1)), False),  # "ran" but the lock says otherwise
    (tick(True, 1, skipped=4), False),  # completed, yet no run of ours can have done it
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


def test_the_scaling_rate_counts_the_ordinary_deliveries_over_their_own_span() -> None:
    # Two ordinary deliveries over 2 s, and a scenario delivery (a clamped
    # Retry-After) finishing 9 s later: the run lasts 11 s, the ordinary ones 2 s.
    facts = DeliveryFacts(
        events_in=3, messages_sent=3, duplicate_messages=0, expected_ids={"a", "b", "hostile"},
        statuses={"a": "succeeded", "b": "succeeded", "hostile": "succeeded"},
        accepted=Counter({"a": 1, "b": 1, "hostile": 1}), requests=3, cut_attempts=0, unverified=0,
        first_sent={"a": 100.0, "b": 100.5, "hostile": 100.0},
        first_accepted={"a": 101.0, "b": 102.0, "hostile": 111.0}, fenced_refused=0, sqs_redriven=0, sqs_parked=0,
        ordinary_ids={"a", "b"})
    report = build_report(config={}, started=100.0, finished=111.0, replicas=1, deliveries=facts, ticks=[],
                          effects=[], invocations=[], kills=0, restarts=0, drained=True, drain_detail="")
    assert report["ordinary_deliveries"] == {"deliveries": 2, "seconds": 2.0, "per_second": 1.0}
    assert report["throughput_per_second"] == round(3 / 11, 2)


@pytest.mark.parametrize(("repeats", "ok"), [(3, True), (4, False)])
def test_one_kill_may_repeat_each_post_it_had_in_flight_and_no_more(repeats: int, ok: bool) -> None:
    # A replica killed with 3 POSTs in flight (concurrent delivery) may leave
    # each of them to be sent again: 3 repeats are explained, a 4th is not.
    ids = {f"d{i}" for i in range(4)}
    accepted = Counter(dict.fromkeys(ids, 1))
    for i in range(repeats):
        accepted[f"d{i % 4}"] += 1
    facts = DeliveryFacts(
        events_in=4, messages_sent=4, duplicate_messages=0, expected_ids=ids,
        statuses=dict.fromkeys(ids, "succeeded"), accepted=accepted, requests=4 + repeats, cut_attempts=0,
        unverified=0, first_sent={}, first_accepted={}, fenced_refused=0, sqs_redriven=0, sqs_parked=0,
        ordinary_ids=ids)
    report = build_report(config={}, started=0.0, finished=1.0, replicas=1, deliveries=facts, ticks=[],
                          effects=[], invocations=[], kills=1, restarts=0, drained=True, drain_detail="",
                          posts_per_kill=3)
    (verdict,) = [i for i in report["invariants"] if i["name"] == "duplicate POSTs only after crashes"]
    assert verdict["ok"] is ok
