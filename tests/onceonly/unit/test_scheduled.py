"""The cron guard on every store (the `store` fixture is parametrised over
PostgreSQL, Redis and DynamoDB/dynalite): one run per tick, duplicates skipped,
failures released, crashed runs taken over, malformed events refused."""

from __future__ import annotations

import copy
import json
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import onceonly
from onceonly.scheduled import scheduled_time_of, tick_lock_name
from onceonly.stores._common import MAX_NAME_BYTES
from tests.support import BACKENDS, REPO_ROOT


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest) -> str:
    """Every store; DynamoDB with ``clock_skew=0``: every process here shares
    this machine's clock, and the leases below are shorter than the default
    assumed skew (1 s), which the guard would refuse."""
    url = str(request.getfixturevalue(f"{request.param}_url"))
    return f"{url}&clock_skew=0" if url.startswith("dynamodb") else url


EVENT = json.loads((REPO_ROOT / "events" / "overdue_invoices.json").read_text())


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

    assert first["status"] == "ran" and first["result"] == {"runs": 1} and first["token"] == body.ticks[0].token
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
    assert [t.lease.grant_number for t in calls] == [1, 2] and calls[0].token < calls[1].token
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
    assert [t.lease.grant_number for t in body.ticks] == [crashed.grant_number + 1]
    assert body.ticks[0].token > crashed.token


def take_over(tick: onceonly.Tick) -> onceonly.Lease:
    """A newer run takes the tick from under ``tick``, as after this run was
    paused past its lease (here: the record is released behind its back)."""
    assert tick.store.release(tick.lease)
    newer = tick.store.acquire(tick.lock_name, ttl=30)
    assert newer is not None and newer.token > tick.token
    assert newer.grant_number == tick.lease.grant_number + 1
    return newer


def test_lost_lease_means_superseded_not_error(store: onceonly.Store, unique: str) -> None:
    ticks: list[onceonly.Tick] = []

    def body(event: Any, context: Any, tick: onceonly.Tick) -> None:
        ticks.append(tick)
        take_over(tick)
        tick.renew()  # raises LeaseLostError

    handler = onceonly.scheduled(store, job=unique, ttl=30)(body)
    outcome = handler(event_at("2026-11-29T02:00:00Z"), None)
    assert outcome["status"] == "superseded" and outcome["token"] == ticks[0].token
    assert ticks[0].lease.grant_number == 1


def test_losing_another_lease_releases_the_tick(store: onceonly.Store, unique: str) -> None:
    def body(event: Any, context: Any, tick: onceonly.Tick) -> None:
        raise onceonly.LeaseLostError("the job-wide lease went to a newer run")

    handler = onceonly.scheduled(store, job=unique, ttl=30)(body)
    outcome = handler(event_at("2026-11-29T02:00:00Z"), None)
    assert outcome["status"] == "superseded"
    retry = store.acquire(tick_lock_name(unique, scheduled_time_of(event_at("2026-11-29T02:00:00Z"))), ttl=30)
    assert retry is not None and retry.grant_number == 2  # released, not left held until expiry


def test_renew_keeps_the_tick_past_its_first_ttl(store: onceonly.Store, unique: str) -> None:
    seen: list[dict[str, Any]] = []

    def body(event: Any, context: Any, tick: onceonly.Tick) -> None:
        tick.renew(30)
        time.sleep(1.5)  # past the first 1 s lease; renewed, so still ours
        seen.append(handler(event_at(event["time"], "dup"), None))

    # 1 s: the renewal must reach a loaded store before the first lease ends.
    handler = onceonly.scheduled(store, job=unique, ttl=1.0)(body)
    assert handler(event_at("2026-11-29T02:00:00Z"), None)["status"] == "ran"
    assert seen[0]["reason"] == "running"


def heartbeat_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("onceonly-heartbeat:")]


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s"
        time.sleep(0.02)


def test_heartbeat_keeps_a_running_tick_past_its_ttl(store: onceonly.Store, unique: str) -> None:
    """The body never renews; the heartbeat does, so a duplicate arriving long
    after the first lease would have run out is still skipped as running."""
    seen: list[dict[str, Any]] = []

    def body(event: Any, context: Any, tick: onceonly.Tick) -> None:
        first_expiry = tick.lease.expires_at
        time.sleep(2.5 * 1.0)  # 2.5 ttls: without renewals the lease ran out twice over
        state = tick.store.inspect(tick.lock_name)
        assert state is not None and state.busy_until > first_expiry + 1.0
        seen.append(handler(event_at(event["time"], "late-duplicate"), None))

    handler = onceonly.scheduled(store, job=unique, ttl=1.0, heartbeat=0.1)(body)
    outcome = handler(event_at("2026-11-29T02:00:00Z"), None)

    assert outcome["status"] == "ran" and outcome["reclaimed"] is False  # one grant, kept by renewals
    assert [d.get("reason") for d in seen] == ["running"]
    assert heartbeat_threads() == []  # stopped with the body


def test_heartbeat_stops_when_the_body_fails(store: onceonly.Store, unique: str) -> None:
    metrics = CountingMetrics()

    def body(event: Any, context: Any, tick: onceonly.Tick) -> None:
        assert [t.name for t in heartbeat_threads()] == [f"onceonly-heartbeat:{tick.lock_name}"]
        raise RuntimeError("database down")

    handler = onceonly.scheduled(store, job=unique, ttl=30, metrics=metrics)(body)
    with pytest.raises(RuntimeError, match="database down"):
        handler(event_at("2026-11-29T02:00:00Z"), None)
    assert heartbeat_threads() == []
    assert metrics.names == ["ticks_failed"]
    state = store.inspect(tick_lock_name(unique, scheduled_time_of(event_at("2026-11-29T02:00:00Z"))))
    assert state is not None and not state.completed and state.busy_until <= time.time()  # released


def test_heartbeat_that_finds_the_tick_taken_over_stops_and_the_run_is_superseded(
        store: onceonly.Store, unique: str) -> None:
    metrics = CountingMetrics()
    newer: list[onceonly.Lease] = []

    def body(event: Any, context: Any, tick: onceonly.Tick) -> str:
        newer.append(take_over(tick))
        wait_for(lambda: tick.lost, "the heartbeat noticed the takeover")
        wait_for(lambda: heartbeat_threads() == [], "the heartbeat stopped renewing")
        with pytest.raises(onceonly.LeaseLostError):
            tick.renew()  # the body learns it too, without asking the store again
        return "stale work"

    handler = onceonly.scheduled(store, job=unique, ttl=0.6, heartbeat=0.05, metrics=metrics)(body)
    outcome = handler(event_at("2026-11-29T02:00:00Z"), None)

    assert outcome["status"] == "superseded" and outcome["token"] < newer[0].token
    assert metrics.names == ["ticks_superseded"]
    state = store.inspect(newer[0].name)
    assert state is not None and state.token == newer[0].token and state.grant_number == 2
    assert state.owner == newer[0].owner and not state.completed


def test_a_lost_tick_wakes_wait_lost_and_runs_every_on_lost_callback_once(
        store: onceonly.Store, unique: str) -> None:
    calls: list[str] = []

    def failing() -> None:
        calls.append("failing")
        raise RuntimeError("a callback's bug")

    def body(event: Any, context: Any, tick: onceonly.Tick) -> str:
        tick.on_lost(failing)
        tick.on_lost(lambda: calls.append("second"))  # runs although the first raised
        assert not tick.wait_lost(0.05) and calls == []
        take_over(tick)
        assert tick.wait_lost(30), "wait_lost did not wake when the heartbeat found the takeover"
        wait_for(lambda: heartbeat_threads() == [], "the heartbeat stopped")
        tick.on_lost(lambda: calls.append("late"))  # registered after the loss: called at once
        return "stale work"

    handler = onceonly.scheduled(store, job=unique, ttl=0.6, heartbeat=0.05)(body)
    assert handler(event_at("2026-11-29T02:00:00Z"), None)["status"] == "superseded"
    assert calls == ["failing", "second", "late"]


def test_an_unreachable_store_counts_a_failed_tick() -> None:
    metrics = CountingMetrics()

    def unreachable() -> onceonly.Store:
        raise onceonly.StoreUnavailableError("connection refused")

    handler = onceonly.scheduled(unreachable, job="j", metrics=metrics)(Recorder())
    with pytest.raises(onceonly.StoreUnavailableError):
        handler(event_at("2026-11-29T02:00:00Z"), None)
    assert metrics.names == ["ticks_failed"]  # Lambda retries it; the count shows each try


def test_store_factory_is_called_lazily(store: onceonly.Store, unique: str) -> None:
    calls: list[int] = []

    def factory() -> onceonly.Store:
        calls.append(1)
        return store

    handler = onceonly.scheduled(factory, job=unique)(Recorder())
    assert calls == []
    assert handler(event_at("2026-11-29T02:00:00Z"), None)["status"] == "ran"
    assert calls == [1]


class LeasesOnly:
    """A user's own wrapper, written before stores had semaphores: it forwards
    the leases alone, which is all the guard uses."""

    def __init__(self, store: onceonly.Store) -> None:
        self._store = store

    def acquire(self, name: str, ttl: float = 30.0) -> onceonly.Lease | None:
        return self._store.acquire(name, ttl)

    def renew(self, lease: onceonly.Lease, ttl: float = 30.0) -> onceonly.Lease:
        return self._store.renew(lease, ttl)

    def release(self, lease: onceonly.Lease) -> bool:
        return self._store.release(lease)

    def complete(self, lease: onceonly.Lease, keep: float = 86400.0, *, expire: bool = False) -> bool:
        return self._store.complete(lease, keep, expire=expire)

    def inspect(self, name: str) -> onceonly.LeaseState | None:
        return self._store.inspect(name)


@pytest.mark.parametrize("as_factory", [False, True], ids=["store", "factory"])
def test_a_wrapper_forwarding_only_the_leases_still_guards_ticks(store: onceonly.Store, unique: str,
                                                                  as_factory: bool) -> None:
    wrapper = LeasesOnly(store)
    assert not isinstance(wrapper, onceonly.Store)  # the store grew since: the guard must not ask for more
    handler = onceonly.scheduled((lambda: wrapper) if as_factory else wrapper, job=unique)(Recorder())
    assert handler(event_at("2026-11-29T02:00:00Z", "a"), None)["status"] == "ran"
    assert handler(event_at("2026-11-29T02:00:00Z", "b"), None)["status"] == "skipped"


def test_a_factory_returning_no_store_is_a_clear_error() -> None:
    handler = onceonly.scheduled(lambda: object(), job="j")(Recorder())  # type: ignore[arg-type, return-value]
    with pytest.raises(onceonly.ConfigError, match="not a onceonly Store .it needs acquire, renew"):
        handler(event_at("2026-11-29T02:00:00Z"), None)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"source": "aws.s3"}, "not a scheduled event"),
        ({"detail-type": "Object Created"}, "not a scheduled event"),
        ({"time": None}, "no 'time'"),
        ({"time": "yesterday"}, "not an ISO 8601 time"),
        ({"time": "2026-11-29T02:00:00"}, "no timezone"),
        # Valid ISO 8601, but before year 1 (or after 9999) once in UTC: OverflowError before.
        ({"time": "0001-01-01T00:30:00+01:00"}, "out of range"),
        ({"time": "9999-12-31T23:30:00-01:00"}, "out of range"),
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
                                     {"job": "j", "keep": -1}, {"job": "j", "heartbeat": 0},
                                     {"job": "j", "ttl": 30, "heartbeat": 15}])
def test_bad_options_fail_at_decoration(options: dict[str, Any]) -> None:
    with pytest.raises(onceonly.ConfigError):
        onceonly.scheduled(lambda: None, **options)  # type: ignore[arg-type]


# The tick's lock name is "tick:" + job + ":2026-11-29T02:00:00Z" (26 bytes more),
# and a lock name holds at most MAX_NAME_BYTES.
LONGEST_JOB = MAX_NAME_BYTES - len(tick_lock_name("", scheduled_time_of(event_at("2026-11-29T02:00:00Z"))))


@pytest.mark.parametrize(("job", "message"), [
    ("j" * 480, "job is 480 bytes in UTF-8; at most 474"),
    ("j" * (LONGEST_JOB + 1), f"job is {LONGEST_JOB + 1} bytes"),
    ("é" * (LONGEST_JOB // 2 + 1), "job is 476 bytes"),
    ("daily\x00report", "job must not contain NUL"),
    ("lone-\ud800", "job is not valid Unicode"),
], ids=["480-chars", "one-byte-over", "utf-8-bytes", "nul", "surrogate"])
def test_a_job_name_no_tick_could_use_fails_at_decoration(job: str, message: str) -> None:
    with pytest.raises(onceonly.ConfigError, match=message):
        onceonly.scheduled(lambda: pytest.fail("no store is touched"), job=job)


def test_the_longest_job_name_accepted_runs_its_ticks(store: onceonly.Store) -> None:
    job = f"{secrets.token_hex(4)}-".ljust(LONGEST_JOB, "j")
    handler = onceonly.scheduled(store, job=job)(Recorder())
    assert handler(event_at("2026-11-29T02:00:00Z"), None)["status"] == "ran"


def test_lock_name_is_job_and_utc_time_not_event_id() -> None:
    when = scheduled_time_of(event_at("2026-11-29T03:00:00+01:00", "x"))
    assert tick_lock_name("job-a", when) == "tick:job-a:2026-11-29T02:00:00Z"


def test_a_ticks_record_is_skipped_within_keep_and_gone_after(
        store: onceonly.Store, store_url: str, unique: str) -> None:
    """The guard asks for expiry: tick records do not pile up at one per tick,
    yet a duplicate inside keep is still skipped."""
    from tests.support.stores.expiry import is_gone_after_keep, wait_past_keep

    keep = 0.5
    handler = onceonly.scheduled(store, job=unique, ttl=30, keep=keep)(Recorder())
    assert handler(event_at("2026-11-29T02:00:00Z", "delivery-a"), None)["status"] == "ran"
    done_until = time.time() + keep
    duplicate = handler(event_at("2026-11-29T02:00:00Z", "delivery-b"), None)
    assert duplicate["status"] == "skipped" and duplicate["reason"] == "completed"
    name = tick_lock_name(unique, scheduled_time_of(event_at("2026-11-29T02:00:00Z")))
    assert not is_gone_after_keep(store, store_url, name)
    wait_past_keep(done_until)
    assert is_gone_after_keep(store, store_url, name)
