"""The cron guard on every store (the `store` fixture is parametrised over
PostgreSQL, Redis and DynamoDB/dynalite): one run per tick, duplicates skipped,
failures released, crashed runs taken over, malformed events refused."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest

import onceonly
from onceonly.scheduled import scheduled_time_of, tick_lock_name

EVENT = json.loads((Path(__file__).resolve().parents[2] / "events" / "overdue_invoices.json").read_text())


def event_at(when: str, event_id: str = "id-1") -> dict[str, Any]:
    event = copy.deepcopy(EVENT)
    event.update(time=when, id=event_id)
    return event


class Recorder:
    """The body's calls, as the tick saw them."""

    def __init__(self) -> None:
        self.ticks: list[onceonly.Tick] = []

    def __call__(self, event: Any, context: Any, tick: onceonly.Tick) -> dict[str, int]:
        self.ticks.append(tick)
        return {"runs": len(self.ticks)}


class CountingMetrics:
    def __init__(self) -> None:
        self.names: list[str] = []

    def add_metric(self, name: str, unit: Any, value: float) -> None:
        self.names.append(name)


def test_one_run_per_tick_and_later_duplicates_are_skipped(store: onceonly.Store, unique: str) -> None:
    body, metrics = Recorder(), CountingMetrics()
    handler = onceonly.scheduled(store, job=unique, ttl=30, keep=600, metrics=metrics)(body)

    first = handler(event_at("2026-11-29T02:00:00Z", "delivery-a"), None)
    # EventBridge may deliver the same tick again with another id
    again = handler(event_at("2026-11-29T02:00:00Z", "delivery-b"), None)
    next_tick = handler(event_at("2026-11-30T02:00:00Z", "delivery-c"), None)

    assert first["status"] == "ran" and first["result"] == {"runs": 1} and first["token"] == 1
    assert again == {"job": unique, "tick": "2026-11-29T02:00:00Z", "status": "skipped",
                     "reason": "completed"}
    assert next_tick["status"] == "ran" and next_tick["tick"] == "2026-11-30T02:00:00Z"
    assert [t.scheduled_time.isoformat() for t in body.ticks] == [
        "2026-11-29T02:00:00+00:00", "2026-11-30T02:00:00+00:00"]
    assert body.ticks[0].event_id == "delivery-a" and not body.ticks[0].reclaimed
    assert metrics.names == ["ticks_run", "ticks_skipped_duplicate", "ticks_run"]
    state = store.inspect(tick_lock_name(unique, body.ticks[0].scheduled_time))
    assert state is not None and state.completed


def test_duplicate_while_running_is_skipped_as_running(store: onceonly.Store, unique: str) -> None:
    inner: list[dict[str, Any]] = []

    def body(event: Any, context: Any, tick: onceonly.Tick) -> None:
        inner.append(handler(event_at(event["time"], "second-delivery"), None))

    handler = onceonly.scheduled(store, job=unique, ttl=30)(body)
    outer = handler(event_at("2026-11-29T02:00:00Z"), None)
    assert outer["status"] == "ran"
    assert inner == [{"job": unique, "tick": "2026-11-29T02:00:00Z", "status": "skipped",
                      "reason": "running"}]


def test_failure_releases_the_tick_and_a_retry_runs(store: onceonly.Store, unique: str) -> None:
    calls: list[onceonly.Tick] = []

    def body(event: Any, context: Any, tick: onceonly.Tick) -> str:
        calls.append(tick)
        if len(calls) == 1:
            raise RuntimeError("database down")
        return "ok"

    handler = onceonly.scheduled(store, job=unique, ttl=30)(body)
    with pytest.raises(RuntimeError, match="database down"):
        handler(event_at("2026-11-29T02:00:00Z"), None)
    retry = handler(event_at("2026-11-29T02:00:00Z"), None)  # no lease wait: it was released
    assert retry["status"] == "ran" and retry["result"] == "ok"
    assert [t.token for t in calls] == [1, 2]
    assert calls[1].reclaimed


def test_crashed_run_is_taken_over_after_its_lease_expires(store: onceonly.Store, unique: str) -> None:
    body = Recorder()
    handler = onceonly.scheduled(store, job=unique, ttl=30)(body)
    event = event_at("2026-11-29T02:00:00Z")
    # a run that took the tick and died: nobody releases or completes it
    crashed = store.acquire(tick_lock_name(unique, scheduled_time_of(event)), ttl=0.5)
    assert crashed is not None

    assert handler(event, None)["reason"] == "running"
    time.sleep(0.8)
    taken_over = handler(event, None)

    assert taken_over["status"] == "ran" and taken_over["reclaimed"] is True
    assert [t.token for t in body.ticks] == [crashed.token + 1]


def test_lost_lease_means_superseded_not_error(store: onceonly.Store, unique: str) -> None:
    def body(event: Any, context: Any, tick: onceonly.Tick) -> None:
        time.sleep(0.7)  # past the 0.4 s lease: another run takes the tick
        assert tick.store.acquire(tick.lock_name, ttl=30) is not None
        tick.renew()  # raises LeaseLostError

    handler = onceonly.scheduled(store, job=unique, ttl=0.4)(body)
    outcome = handler(event_at("2026-11-29T02:00:00Z"), None)
    assert outcome["status"] == "superseded" and outcome["token"] == 1


def test_losing_another_lease_releases_the_tick(store: onceonly.Store, unique: str) -> None:
    def body(event: Any, context: Any, tick: onceonly.Tick) -> None:
        raise onceonly.LeaseLostError("the job-wide lease went to a newer run")

    handler = onceonly.scheduled(store, job=unique, ttl=30)(body)
    outcome = handler(event_at("2026-11-29T02:00:00Z"), None)
    assert outcome["status"] == "superseded"
    retry = store.acquire(tick_lock_name(unique, scheduled_time_of(event_at("2026-11-29T02:00:00Z"))), ttl=30)
    assert retry is not None and retry.token == 2  # released, not left held until expiry


def test_renew_keeps_the_tick_past_its_first_ttl(store: onceonly.Store, unique: str) -> None:
    seen: list[dict[str, Any]] = []

    def body(event: Any, context: Any, tick: onceonly.Tick) -> None:
        tick.renew(30)
        time.sleep(0.7)  # past the first 0.4 s lease; renewed, so still ours
        seen.append(handler(event_at(event["time"], "dup"), None))

    handler = onceonly.scheduled(store, job=unique, ttl=0.4)(body)
    assert handler(event_at("2026-11-29T02:00:00Z"), None)["status"] == "ran"
    assert seen[0]["reason"] == "running"


def test_store_factory_is_called_lazily(store: onceonly.Store, unique: str) -> None:
    calls: list[int] = []

    def factory() -> onceonly.Store:
        calls.append(1)
        return store

    handler = onceonly.scheduled(factory, job=unique)(Recorder())
    assert calls == []
    assert handler(event_at("2026-11-29T02:00:00Z"), None)["status"] == "ran"
    assert calls == [1]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"source": "aws.s3"}, "not a scheduled event"),
        ({"detail-type": "Object Created"}, "not a scheduled event"),
        ({"time": None}, "no 'time'"),
        ({"time": "yesterday"}, "not an ISO 8601 time"),
        ({"time": "2026-11-29T02:00:00"}, "no timezone"),
    ],
)
def test_malformed_event_is_a_clear_error(change: dict[str, Any], message: str) -> None:
    body = Recorder()
    handler = onceonly.scheduled(lambda: pytest.fail("no store is touched"), job="j")(body)
    event = {**EVENT, **change}
    with pytest.raises(onceonly.InvalidEventError, match=message) as caught:
        handler(event, None)
    assert isinstance(caught.value, onceonly.ConfigError) and isinstance(caught.value, ValueError)
    assert body.ticks == []


def test_non_object_event_is_a_clear_error() -> None:
    handler = onceonly.scheduled(lambda: pytest.fail("no store is touched"), job="j")(Recorder())
    with pytest.raises(onceonly.InvalidEventError, match="a JSON object"):
        handler(["not", "an", "event"], None)


@pytest.mark.parametrize("options", [{"job": ""}, {"job": "two words"}, {"job": "j", "ttl": 0},
                                     {"job": "j", "keep": -1}])
def test_bad_options_fail_at_decoration(options: dict[str, Any]) -> None:
    with pytest.raises(onceonly.ConfigError):
        onceonly.scheduled(lambda: None, **options)  # type: ignore[arg-type]


def test_lock_name_is_job_and_utc_time_not_event_id() -> None:
    when = scheduled_time_of(event_at("2026-11-29T03:00:00+01:00", "x"))
    assert tick_lock_name("job-a", when) == "tick:job-a:2026-11-29T02:00:00Z"
