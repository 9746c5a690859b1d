"""A hypothesis state machine that drives one store (leases and one due queue)
and checks every answer against the reference model (model.py).

Time passes through short ttls: a rule waits past SHORT, so every lease, claim
or due time of SHORT seconds surely ran out. PostgreSQL and Redis run on their
server clocks, so that wait is a real sleep; the DynamoDB store runs on the
client's clock, which the tests replace with a :class:`FakeClock`, so its runs
wait for nothing and every expiry is exact."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import onceonly
from onceonly import Claim, Lease
from tests.onceonly.properties.model import SLACK, Call, Leases, QueueModel

SHORT = 0.1  # seconds: runs out within a run
LONG = 600.0  # seconds: never runs out within a run
DURATIONS = st.sampled_from([SHORT, LONG])
LEASE_NAMES = st.sampled_from(["a", "b"])
ITEM_IDS = st.sampled_from(["i1", "i2", "i3"])
# Leases and claims are picked by index (modulo how many there are), never
# drawn from a hypothesis Bundle: what a store grants depends on timing, and
# a draw that depends on it would make the same example generate differently
# on replay (hypothesis then gives up with FlakyStrategyDefinition).
PICK = st.integers(0, 63)
DEPTH_EVERY = 3


class RealClock:
    """The wall clock; waiting is sleeping."""

    def time(self) -> float:
        return time.time()

    def wait(self, seconds: float) -> None:
        time.sleep(seconds)


class FakeClock:
    """A clock that moves only when told to (for a store on client time)."""

    def __init__(self) -> None:
        self.now = time.time()

    def time(self) -> float:
        return self.now

    def wait(self, seconds: float) -> None:
        self.now += seconds


class StoreMachine(RuleBasedStateMachine):
    """What both machines share: the store, its clock, names of the run's own."""

    store: onceonly.Store
    clock: RealClock | FakeClock

    def __init__(self) -> None:
        super().__init__()
        self.prefix = f"m-{secrets.token_hex(4)}"  # every run (example) on names of its own

    def _call(self, fn: Callable[[], Any]) -> tuple[Call, Any]:
        start = self.clock.time()
        result = fn()
        return Call(start, self.clock.time()), result

    # Half a SHORT leaves expiries in doubt (the model accepts either answer
    # there); a whole one plus slack makes every SHORT one surely past.
    @rule(seconds=st.sampled_from([SHORT / 2, SHORT + 4 * SLACK]))
    def time_passes(self, seconds: float) -> None:
        self.clock.wait(seconds)


class LeaseMachine(StoreMachine):
    """acquire, renew, release, complete and inspect on a few names. Every lease
    ever granted stays in ``leases``, so the writes are also tried with stale ones."""

    def __init__(self) -> None:
        super().__init__()
        self.lease_model = Leases()
        self.leases: list[Lease] = []

    def _name(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    @rule(name=LEASE_NAMES, ttl=DURATIONS)
    def acquire(self, name: str, ttl: float) -> None:
        call, lease = self._call(lambda: self.store.acquire(self._name(name), ttl=ttl))
        self.lease_model.acquire(self._name(name), ttl, call, lease)
        if lease is not None:
            self.leases.append(lease)

    @rule(pick=PICK, ttl=DURATIONS)
    def renew(self, pick: int, ttl: float) -> None:
        if not self.leases:
            return
        lease = self.leases[pick % len(self.leases)]

        def renew() -> Lease | None:
            try:
                return self.store.renew(lease, ttl=ttl)
            except onceonly.LeaseLostError:
                return None

        call, renewed = self._call(renew)
        self.lease_model.renew(lease, ttl, call, renewed)
        if renewed is not None:
            self.leases.append(renewed)

    @rule(pick=PICK)
    def release(self, pick: int) -> None:
        if self.leases:
            lease = self.leases[pick % len(self.leases)]
            call, ok = self._call(lambda: self.store.release(lease))
            self.lease_model.release(lease, call, ok)

    @rule(pick=PICK, keep=DURATIONS)
    def complete(self, pick: int, keep: float) -> None:
        if self.leases:
            lease = self.leases[pick % len(self.leases)]
            call, ok = self._call(lambda: self.store.complete(lease, keep=keep))
            self.lease_model.complete(lease, keep, call, ok)

    @rule(name=LEASE_NAMES)
    def inspect(self, name: str) -> None:
        _, state = self._call(lambda: self.store.inspect(self._name(name)))
        self.lease_model.inspect(self._name(name), state)


class QueueMachine(StoreMachine):
    """put, cancel, claim, ack, ack_many, retry and depth on one due queue. Every
    claim ever returned stays in ``claims``, so acks and retries are also tried
    with stale ones."""

    def __init__(self) -> None:
        super().__init__()
        self.queue = self.store.queue(f"{self.prefix}-q")
        self.queue_model = QueueModel()
        self.claims: list[Claim] = []
        self.steps = 0

    def _claim(self, pick: int) -> Claim:
        return self.claims[pick % len(self.claims)]

    @rule(item_id=ITEM_IDS, delay=st.sampled_from([None, SHORT, LONG]))
    def put(self, item_id: str, delay: float | None) -> None:
        due_at = None if delay is None else self.clock.time() + delay
        call, _ = self._call(lambda: self.queue.put(item_id, due_at=due_at, payload={"id": item_id}))
        self.queue_model.put(item_id, due_at, call)

    @rule(pick=PICK, delay=st.sampled_from([None, SHORT, LONG]))
    def reschedule(self, pick: int, delay: float | None) -> None:
        """put on an item that was claimed: takes it from its holder, if still held."""
        if self.claims:
            self.put(self._claim(pick).item_id, delay)

    @rule(item_id=ITEM_IDS)
    def cancel(self, item_id: str) -> None:
        _, ok = self._call(lambda: self.queue.cancel(item_id))
        self.queue_model.cancel(item_id, ok)

    @rule(limit=st.integers(1, 3), lease=DURATIONS)
    def claim(self, limit: int, lease: float) -> None:
        call, got = self._call(lambda: self.queue.claim(limit=limit, lease=lease))
        self.queue_model.claim(limit, lease, call, got)
        for c in got:
            assert c.payload == {"id": c.item_id}, f"payload of {c.item_id}: {c.payload!r}"
        self.claims.extend(got)

    @rule(pick=PICK)
    def ack(self, pick: int) -> None:
        if self.claims:
            claim = self._claim(pick)
            _, ok = self._call(lambda: self.queue.ack(claim))
            self.queue_model.ack(claim, ok)

    @rule(picks=st.lists(PICK, min_size=1, max_size=3))
    def ack_many(self, picks: list[int]) -> None:
        batch = list({id(c): c for c in map(self._claim, picks)}.values()) if self.claims else []
        if batch:
            _, results = self._call(lambda: self.queue.ack_many(batch))
            assert len(results) == len(batch)
            for claim, ok in zip(batch, results, strict=True):
                self.queue_model.ack(claim, ok)

    @rule(pick=PICK, delay=st.sampled_from([0.0, SHORT, LONG]))
    def retry(self, pick: int, delay: float) -> None:
        if self.claims:
            claim = self._claim(pick)
            due_at = self.clock.time() + delay
            _, ok = self._call(lambda: self.queue.retry(claim, due_at=due_at))
            self.queue_model.retry(claim, due_at, ok)

    @invariant()
    def depth_matches(self) -> None:
        # Every DEPTH_EVERY steps, not every step (a DynamoDB depth walks every
        # shard); counted in steps, so it never changes what hypothesis draws.
        self.steps += 1
        if self.steps % DEPTH_EVERY == 0:
            self.check_depth()

    def check_depth(self) -> None:
        call, depth = self._call(self.queue.depth)
        self.queue_model.depth(call, depth)


def bind(machine: type[StoreMachine], store: onceonly.Store, clock: RealClock | FakeClock) -> type[StoreMachine]:
    """``machine`` bound to one open store and the clock its expiries run on."""
    return type(machine.__name__, (machine,), {"store": store, "clock": clock})
