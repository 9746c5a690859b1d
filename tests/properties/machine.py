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
from hypothesis.stateful import Bundle, RuleBasedStateMachine, multiple, rule

import onceonly
from onceonly import Claim, Lease

from .model import SLACK, Call, Leases, QueueModel

SHORT = 0.1  # seconds: runs out within a run
LONG = 600.0  # seconds: never runs out within a run
DURATIONS = st.sampled_from([SHORT, LONG])
LEASE_NAMES = st.sampled_from(["a", "b"])
ITEM_IDS = st.sampled_from(["i1", "i2", "i3"])


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

    @rule()
    def time_passes(self) -> None:
        self.clock.wait(SHORT + 4 * SLACK)


class LeaseMachine(StoreMachine):
    """acquire, renew, release, complete and inspect on a few names."""

    leases = Bundle("leases")

    def __init__(self) -> None:
        super().__init__()
        self.lease_model = Leases()

    def _name(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    @rule(target=leases, name=LEASE_NAMES, ttl=DURATIONS)
    def acquire(self, name: str, ttl: float) -> Any:
        call, lease = self._call(lambda: self.store.acquire(self._name(name), ttl=ttl))
        self.lease_model.acquire(self._name(name), ttl, call, lease)
        return multiple(lease) if lease is not None else multiple()

    @rule(target=leases, lease=leases, ttl=DURATIONS)
    def renew(self, lease: Lease, ttl: float) -> Any:
        def renew() -> Lease | None:
            try:
                return self.store.renew(lease, ttl=ttl)
            except onceonly.LeaseLostError:
                return None

        call, renewed = self._call(renew)
        self.lease_model.renew(lease, ttl, call, renewed)
        return multiple(renewed) if renewed is not None else multiple()

    @rule(lease=leases)
    def release(self, lease: Lease) -> None:
        call, ok = self._call(lambda: self.store.release(lease))
        self.lease_model.release(lease, call, ok)

    @rule(lease=leases, keep=DURATIONS)
    def complete(self, lease: Lease, keep: float) -> None:
        call, ok = self._call(lambda: self.store.complete(lease, keep=keep))
        self.lease_model.complete(lease, keep, call, ok)

    @rule(name=LEASE_NAMES)
    def inspect(self, name: str) -> None:
        _, state = self._call(lambda: self.store.inspect(self._name(name)))
        self.lease_model.inspect(self._name(name), state)



class QueueMachine(StoreMachine):
    """put, cancel, claim, ack, ack_many, retry and depth on one due queue."""

    claims = Bundle("claims")

    def __init__(self) -> None:
        super().__init__()
        self.queue = self.store.queue(f"{self.prefix}-q")
        self.queue_model = QueueModel()

    @rule(item_id=ITEM_IDS, delay=st.sampled_from([None, SHORT, LONG]))
    def put(self, item_id: str, delay: float | None) -> None:
        due_at = None if delay is None else self.clock.time() + delay
        call, _ = self._call(lambda: self.queue.put(item_id, due_at=due_at, payload={"id": item_id}))
        self.queue_model.put(item_id, due_at, call)

    @rule(claim=claims, delay=st.sampled_from([None, SHORT, LONG]))
    def reschedule(self, claim: Claim, delay: float | None) -> None:
        """put on an item that was claimed: takes it from its holder, if still held."""
        self.put(claim.item_id, delay)

    @rule(item_id=ITEM_IDS)
    def cancel(self, item_id: str) -> None:
        _, ok = self._call(lambda: self.queue.cancel(item_id))
        self.queue_model.cancel(item_id, ok)

    @rule(target=claims, limit=st.integers(1, 3), lease=DURATIONS)
    def claim(self, limit: int, lease: float) -> Any:
        call, got = self._call(lambda: self.queue.claim(limit=limit, lease=lease))
        self.queue_model.claim(limit, lease, call, got)
        for c in got:
            assert c.payload == {"id": c.item_id}, f"payload of {c.item_id}: {c.payload!r}"
        return multiple(*got)

    @rule(claim=claims)
    def ack(self, claim: Claim) -> None:
        _, ok = self._call(lambda: self.queue.ack(claim))
        self.queue_model.ack(claim, ok)

    @rule(batch=st.lists(claims, min_size=1, max_size=3, unique_by=lambda c: (c.item_id, c.token, c.owner)))
    def ack_many(self, batch: list[Claim]) -> None:
        _, results = self._call(lambda: self.queue.ack_many(batch))
        assert len(results) == len(batch)
        for claim, ok in zip(batch, results, strict=True):
            self.queue_model.ack(claim, ok)

    @rule(claim=claims, delay=st.sampled_from([0.0, SHORT, LONG]))
    def retry(self, claim: Claim, delay: float) -> None:
        due_at = self.clock.time() + delay
        _, ok = self._call(lambda: self.queue.retry(claim, due_at=due_at))
        self.queue_model.retry(claim, due_at, ok)

    @rule()
    def depth(self) -> None:
        call, depth = self._call(self.queue.depth)
        self.queue_model.depth(call, depth)


def bind(machine: type[StoreMachine], store: onceonly.Store, clock: RealClock | FakeClock) -> type[StoreMachine]:
    """``machine`` bound to one open store and the clock its expiries run on."""
    return type(machine.__name__, (machine,), {"store": store, "clock": clock})
