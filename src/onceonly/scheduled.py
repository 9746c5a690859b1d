"""The cron guard: run an EventBridge-scheduled Lambda handler once per tick, on
any number of replicas and however often the tick is delivered.

A tick is identified by the job name and the event's ``time`` (the scheduled
time), never by the event ``id``: EventBridge may deliver one tick twice with
different ids. The guard claims the lock record ``tick:JOB:TIME`` through the
store's lease API (acquire/renew/release/complete only, so it works on every
backend):

- granted: the body runs with a :class:`Tick` (fencing token, renewal) while a
  heartbeat thread renews the tick's short lease; success completes the record
  for ``keep`` seconds, so later duplicates of the tick are skipped, and lets
  it expire after that (``complete(expire=True)``: records do not pile up at
  one per tick); an exception releases it and propagates, so a retry of the
  tick can run;
- held by a running invocation, or completed: the invocation is skipped and
  logged. Never an error;
- a crashed run's heartbeat dies with it, so its record frees itself within one
  ``ttl`` (30 s by default), well before Lambda retries the failed invocation
  (about 60 s, then 120 s later); the retry takes it over with a higher token
  (``Tick.reclaimed``).

The heartbeat renews against the lease's end (see :mod:`onceonly.heartbeat`):
when the end passes without a successful renewal, the body is told
(``tick.lost``, ``tick.wait_lost()``, ``tick.on_lost()``) so that a long body
can stop. The body's own writes must still be idempotent or fenced with
``tick.token``: a run paused past its lease is not stopped, only refused at its
next fenced write.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import InitVar, dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from .api import Lease, LeaseStore
from .errors import ConfigError, LeaseLostError, OnceOnlyError
from .heartbeat import Heartbeat, LeaseClock, assumed_skew
from .stores._common import MAX_NAME_BYTES, check_name, check_seconds

SCHEDULED_DETAIL_TYPE = "Scheduled Event"
SCHEDULED_SOURCE = "aws.events"
# Well under Lambda's first retry of a failed asynchronous invocation (about
# 60 s): a crashed run's tick must be free again when that retry arrives.
DEFAULT_TTL = 30.0
# Default heartbeat: ttl / 3. A renewal starts when two thirds of the lease are
# left; a failed one is retried every ttl / 6, so two failures in a row, or one
# renewal hanging for a store timeout of ttl / 3, still keep the lease.
HEARTBEATS_PER_TTL = 3
DEFAULT_KEEP = 7 * 86400.0

_log = logging.getLogger("onceonly.scheduled")


class InvalidEventError(ConfigError):
    """The event is not an EventBridge scheduled event (wrong source or
    detail-type), or its ``time`` is missing or not an ISO 8601 UTC time.
    A ConfigError (so a ValueError too): the caller passed the wrong input."""


class MetricsSink(Protocol):
    """What the guard needs of a metrics object (Powertools ``Metrics`` fits)."""

    def add_metric(self, name: str, unit: Any, value: float) -> None: ...


@dataclass
class Tick:
    """One claimed tick, handed to the body.

    ``token`` is the lease's fencing token: it strictly increases across every
    grant of this tick, so stamp it on the writes that must come from the current
    holder only. ``reclaimed`` is true when an earlier run of this tick did not
    complete (it crashed, timed out or failed) and this run took over.

    The guard's heartbeat renews the lease from another thread while the body
    runs; ``renew()`` is safe to call from the body too. When the lease is lost
    (its end passed, by this process's clock, without a successful renewal, or
    a renewal found a newer run), ``lost`` turns true, ``wait_lost()`` returns
    and every ``on_lost`` callback runs: a long body should stop then. A newer
    run may own the tick from that moment; its fenced writes refuse this one's.
    """

    job: str
    scheduled_time: datetime
    event_id: str | None
    lease: Lease
    ttl: float
    _store: LeaseStore = field(repr=False)
    # time.monotonic() before the request that granted the lease was sent
    # (default: now); the lease's end is counted from it, ``clock_skew``
    # seconds early (the store's assumed skew between its clients' clocks).
    asked_at: InitVar[float | None] = None
    clock_skew: InitVar[float] = 0.0
    _clock: LeaseClock = field(init=False, repr=False)
    _renewing: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _lost: threading.Event = field(default_factory=threading.Event, repr=False)
    _losing: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _lost_callbacks: list[Callable[[], object]] = field(default_factory=list, repr=False)

    def __post_init__(self, asked_at: float | None, clock_skew: float) -> None:
        self._clock = LeaseClock(time.monotonic() if asked_at is None else asked_at, self.ttl, clock_skew)

    @property
    def lock_name(self) -> str:
        return self.lease.name

    @property
    def token(self) -> int:
        return self.lease.token

    @property
    def reclaimed(self) -> bool:
        return self.lease.grant_number > 1

    @property
    def store(self) -> LeaseStore:
        """The coordination store the tick was claimed on (for job-wide leases)."""
        return self._store

    @property
    def lost(self) -> bool:
        """True once the tick's lease is lost (see the class docstring). The body
        may check it between steps to stop early."""
        return self._lost.is_set()

    def wait_lost(self, timeout: float | None = None) -> bool:
        """Sleep up to ``timeout`` seconds, waking at once if the lease is lost;
        True if it was. ``if tick.wait_lost(5): return`` instead of ``sleep(5)``."""
        return self._lost.wait(timeout)

    def on_lost(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` once when the lease is lost (at once if it already
        was), on the thread that found the loss (the heartbeat's, or the body's
        own ``renew()``): e.g. to cancel a request in flight. An exception it
        raises is logged, not propagated."""
        with self._losing:
            if not self._lost.is_set():
                self._lost_callbacks.append(callback)
                return
        _call_quietly(callback)

    def renew(self, ttl: float | None = None) -> Lease:
        """Extend the tick's lease to now + ``ttl`` (default: the guard's ttl).
        Raises LeaseLostError if another run took the tick over, and on every
        call once the lease was lost. Waits for a renewal in flight first (at
        most the store's timeout)."""
        with self._renewing:  # the heartbeat and the body may renew at once
            if self.lost:
                raise LeaseLostError(f"tick {self.lease.name!r} token {self.token} lost its lease")
            seconds = self.ttl if ttl is None else ttl
            sent = time.monotonic()  # before the request: the lease ends no earlier than sent + ttl
            try:
                self.lease = self._store.renew(self.lease, seconds)
            except LeaseLostError as exc:
                self._lose(exc)
                raise
            self._clock.renewed(sent, seconds)
            return self.lease

    def _lose(self, reason: LeaseLostError) -> None:
        """Mark the tick lost (``reason``: what the heartbeat or renew found) and
        run the on_lost callbacks, once."""
        with self._losing:
            if self._lost.is_set():
                return
            self._lost.set()
            callbacks, self._lost_callbacks = self._lost_callbacks, []
        for callback in callbacks:
            _call_quietly(callback)


def _call_quietly(callback: Callable[[], object]) -> None:
    """An on_lost callback's error must not stop the others, nor the heartbeat."""
    try:
        callback()
    except Exception:
        _log.exception("a tick.on_lost callback failed")


Body = Callable[[Any, Any, Tick], Any]
Handler = Callable[[Any, Any], dict[str, Any]]
# The leases are all the guard uses: any wrapper forwarding them will do.
StoreSource = LeaseStore | Callable[[], LeaseStore]


def tick_lock_name(job: str, scheduled_time: datetime) -> str:
    """The lock record of one tick: job name + scheduled time, UTC, whole seconds."""
    return f"tick:{job}:{scheduled_time.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


# What tick_lock_name adds to the job name: "tick:" and ":YYYY-MM-DDTHH:MM:SSZ".
_TICK_NAME_OVERHEAD = len(tick_lock_name("", datetime(2000, 1, 1, tzinfo=UTC)))


def scheduled_time_of(event: Any) -> datetime:
    """The scheduled time of an EventBridge scheduled event (timezone-aware, UTC).
    Raises InvalidEventError for anything else."""
    if not isinstance(event, Mapping):
        raise InvalidEventError(
            f"expected an EventBridge scheduled event (a JSON object), got {type(event).__name__}"
        )
    source, detail_type = event.get("source"), event.get("detail-type")
    if source != SCHEDULED_SOURCE or detail_type != SCHEDULED_DETAIL_TYPE:
        raise InvalidEventError(
            f"not a scheduled event: source={source!r}, detail-type={detail_type!r} "
            f"(expected {SCHEDULED_SOURCE!r} and {SCHEDULED_DETAIL_TYPE!r})"
        )
    raw = event.get("time")
    if not isinstance(raw, str) or not raw:
        raise InvalidEventError(f"scheduled event has no 'time' (got {raw!r}); it names the tick")
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError as exc:
        raise InvalidEventError(f"scheduled event 'time' {raw!r} is not an ISO 8601 time") from exc
    if parsed.tzinfo is None:
        raise InvalidEventError(
            f"scheduled event 'time' {raw!r} has no timezone (EventBridge sends UTC, '…Z')"
        )
    try:
        return parsed.astimezone(UTC).replace(microsecond=0)
    except OverflowError as exc:  # e.g. 0001-01-01T00:30:00+01:00 is before year 1 in UTC
        raise InvalidEventError(f"scheduled event 'time' {raw!r} is out of range in UTC") from exc


def _check_job(job: str) -> str:
    """A job name every tick's lock name can be built from: checked here, at
    decoration, or every tick of the job would fail at the store."""
    check_name(job, "job", max_bytes=MAX_NAME_BYTES - _TICK_NAME_OVERHEAD)
    if any(c.isspace() for c in job):
        raise ConfigError(f"job must be a name without whitespace, got {job!r}")
    return job


def _resolve(source: StoreSource) -> LeaseStore:
    if isinstance(source, LeaseStore):
        return source
    store = source()
    if not isinstance(store, LeaseStore):
        raise ConfigError(f"the store factory returned {type(store).__name__}, not a onceonly Store "
                          "(it needs acquire, renew, release, complete and inspect)")
    return store


def scheduled(
    store: StoreSource,
    *,
    job: str,
    ttl: float = DEFAULT_TTL,
    heartbeat: float | None = None,
    keep: float = DEFAULT_KEEP,
    logger: Any = None,
    metrics: MetricsSink | None = None,
) -> Callable[[Body], Handler]:
    """Turn ``body(event, context, tick)`` into a Lambda handler ``(event, context)``
    that runs the body at most once at a time per tick and never again after it
    completed (for ``keep`` seconds).

    ``store`` is a Store (or any LeaseStore) or a zero-argument callable returning one (called per
    invocation, so pass a cached factory such as ``onceonly_app.db.clients.coordination_store``).
    ``ttl`` is the tick's lease and ``heartbeat`` (default ``ttl / 3``) how often
    a background thread renews it while the body runs: each renewal starts
    ``heartbeat`` after the previous successful one was sent, a failed one is
    retried ``heartbeat / 2`` later while the lease lasts, and when the lease's
    end passes unrenewed the body is told (``tick.lost``). A run that dies stops
    renewing, so its tick is free again within ``ttl``: keep ``ttl`` well under
    the platform's retry delay (Lambda retries a failed asynchronous invocation
    after about 60 s), and the store URL's ``timeout`` at most ``ttl / 3`` (the
    default 10 s for the default 30 s), so that a renewal that hangs for the
    whole timeout leaves time for another.
    ``logger`` (stdlib or Powertools) gets one structured line per outcome;
    ``metrics`` gets ``ticks_run``, ``ticks_skipped_duplicate``,
    ``ticks_superseded``, ``ticks_failed`` (every invocation that raises) and
    ``leases_reclaimed`` counts.

    The handler returns ``{"job", "tick", "status", ...}`` where status is
    ``ran``, ``skipped`` (reason ``running`` or ``completed``) or ``superseded``
    (the lease was lost: another run owns the tick now; not an error).
    Raises InvalidEventError for a non-scheduled event, the store's errors
    (StoreUnavailableError, …) when the tick cannot be claimed, and whatever the
    body raised after releasing the tick.
    """
    job = _check_job(job)
    ttl = check_seconds(ttl, "ttl")
    beat = _check_heartbeat(ttl, heartbeat)
    keep = check_seconds(keep, "keep")
    log = logger if logger is not None else _log

    def count(name: str) -> None:
        if metrics is not None:
            metrics.add_metric(name=name, unit="Count", value=1)

    def run_tick(body: Body, event: Any, context: Any) -> dict[str, Any]:
        when = scheduled_time_of(event)
        tick_store = _resolve(store)
        skew = _check_skew(ttl, beat, assumed_skew(tick_store))
        name = tick_lock_name(job, when)
        report: dict[str, Any] = {"job": job, "tick": when.strftime("%Y-%m-%dT%H:%M:%SZ")}
        asked = time.monotonic()  # before the request: the lease ends no earlier than asked + ttl
        lease = tick_store.acquire(name, ttl=ttl)
        if lease is None:
            return _skipped(tick_store, name, report, log, count)
        tick = Tick(job=job, scheduled_time=when, event_id=_event_id(event), lease=lease, ttl=ttl,
                    _store=tick_store, asked_at=asked, clock_skew=skew)
        context_fields = {"lock": name, "token": lease.token, "owner": lease.owner,
                          "event_id": tick.event_id}
        if tick.reclaimed:
            count("leases_reclaimed")
            log.warning("taking over a tick an earlier run did not complete", extra=context_fields)
        try:
            # Stopped (and joined) before the tick is completed or released below.
            with Heartbeat(tick.renew, tick._clock, ttl, beat, name=name, on_lost=tick._lose, log=log,
                           fields=context_fields):
                result = body(event, context, tick)
        except LeaseLostError as exc:
            # A lease the body relies on (the tick's, or one of its own) was
            # lost: a newer run owns the work. Not an error. If the tick's
            # lease is still ours, give it back so a retry is not blocked.
            count("ticks_superseded")
            released = tick_store.release(tick.lease)
            log.warning("tick superseded: a lease was lost, a newer run owns the work",
                        extra={**context_fields, "error": str(exc), "released": released})
            return {**report, "status": "superseded", "token": lease.token}
        except Exception:
            _release_after_failure(tick_store, tick.lease, log, context_fields)
            raise
        # expire: no retry or redelivery of a tick comes after keep, so its
        # record may go then (the only grant-once name the guard writes).
        if not tick_store.complete(tick.lease, keep=keep, expire=True):
            count("ticks_superseded")
            log.warning("tick ran but its lease was lost before completion; a newer run owns it",
                        extra=context_fields)
            return {**report, "status": "superseded", "token": lease.token, "result": result}
        count("ticks_run")
        log.info("tick ran", extra=context_fields)
        return {**report, "status": "ran", "token": lease.token, "reclaimed": tick.reclaimed,
                "result": result}

    def decorate(body: Body) -> Handler:
        @functools.wraps(body)
        def handler(event: Any, context: Any) -> dict[str, Any]:
            try:
                return run_tick(body, event, context)
            except Exception:
                # Lambda retries the invocation (about 60 s, then 120 s later) and
                # after that hands it to the on-failure destination: count each try.
                count("ticks_failed")
                raise

        return handler

    return decorate


def _check_heartbeat(ttl: float, heartbeat: float | None) -> float:
    if heartbeat is None:
        return ttl / HEARTBEATS_PER_TTL
    beat = check_seconds(heartbeat, "heartbeat")
    if beat >= ttl / 2:
        raise ConfigError(f"heartbeat ({beat} s) must be under half the ttl ({ttl} s), so that one late "
                          "renewal does not lose the tick")
    return beat


def _check_skew(ttl: float, beat: float, skew: float) -> float:
    """The store's assumed clock skew, if the tick's lease, as its holder
    counts it (``skew`` early: heartbeat.LeaseClock), outlasts a heartbeat."""
    if beat >= ttl - skew:
        raise ConfigError(f"the ttl ({ttl:g} s) less the store's assumed clock skew ({skew:g} s) must be longer"
                          f" than the heartbeat ({beat:g} s), or the lease counts as lost before its first"
                          " renewal: raise the ttl (or lower the store's clock_skew if its clients' clocks are"
                          " closer)")
    return skew


def _event_id(event: Mapping[str, Any]) -> str | None:
    value = event.get("id")
    return value if isinstance(value, str) else None


def _skipped(store: LeaseStore, name: str, report: dict[str, Any], log: Any,
             count: Callable[[str], None]) -> dict[str, Any]:
    state = store.inspect(name)
    reason = "completed" if state is not None and state.completed else "running"
    count("ticks_skipped_duplicate")
    log.info("tick skipped: duplicate delivery", extra={"lock": name, "reason": reason,
                                                         "token": state.token if state else None})
    return {**report, "status": "skipped", "reason": reason}


def _release_after_failure(store: LeaseStore, lease: Lease, log: Any, fields: dict[str, Any]) -> None:
    """Give the tick back so a retry can run at once; the body's error is what
    propagates, so a failing release is logged, not raised over it."""
    try:
        released = store.release(lease)
    except OnceOnlyError as exc:
        log.error("tick failed and could not be released; it frees itself when the lease expires",
                  extra={**fields, "error": str(exc)})
        return
    log.error("tick failed; released for a retry", extra={**fields, "released": released})
