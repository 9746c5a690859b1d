"""A Store for heartbeat tests: every call goes to a real store reached through a
FaultProxy, and each ``renew`` call first puts the link into the next fault of
a script, for the duration of that call only. So the heartbeat meets real
driver errors and real timeouts, at the renewals the test chose.

Faults (one per renewal, in order; renewals after the script are clean):

- ``FAIL``: every connection is dropped (RST) while the renewal runs;
- ``Slow(s)``: every chunk is forwarded ``s`` seconds late (request and reply);
- ``LateReply(s)``: the request goes through at once, every chunk of the reply
  ``s`` seconds late: the store applied the renewal long before the caller
  hears of it;
- ``Hang(t)``: a black hole, and the renewal returns only after ``t`` seconds,
  the store's whole ``timeout`` (its own reply bound is half of it: this is a
  connect that hangs too, the worst the bound allows);
- ``DEAD``: a black hole that stays: the link is gone until the test calls
  ``proxy.passthrough()``.

Records every grant the store reported (the acquire's and each successful
renewal's Lease, in order) and every renewal call."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import onceonly
from onceonly import Lease, LeaseState
from tests.support.servers.faultproxy import FaultProxy


@dataclass(frozen=True)
class Slow:
    seconds: float


@dataclass(frozen=True)
class LateReply:
    seconds: float


@dataclass(frozen=True)
class Hang:
    seconds: float


FAIL = "fail"
DEAD = "dead"
Fault = str | Slow | LateReply | Hang


@dataclass
class RenewCall:
    started: float  # time.monotonic()
    ended: float
    fault: Fault | None
    error: BaseException | None


class FaultyRenewals:
    kind = "faulty-renewals"

    def __init__(self, store: onceonly.Store, proxy: FaultProxy, faults: Sequence[Fault]) -> None:
        self._store, self._proxy = store, proxy
        self._faults = list(faults)
        self._lock = threading.Lock()
        self.grants: list[Lease] = []
        self.renewals: list[RenewCall] = []

    def _next_fault(self) -> Fault | None:
        with self._lock:
            return self._faults.pop(0) if self._faults else None

    def renew(self, lease: Lease, ttl: float = 30.0) -> Lease:
        fault, started = self._next_fault(), time.monotonic()
        error: BaseException | None = None
        try:
            self._begin(fault)
            renewed = self._store.renew(lease, ttl)
            with self._lock:
                self.grants.append(renewed)
            return renewed
        except BaseException as exc:
            error = exc
            raise
        finally:
            if isinstance(fault, Hang):
                time.sleep(max(0.0, started + fault.seconds - time.monotonic()))
            if fault is not None and fault != DEAD:
                self._proxy.passthrough()
            with self._lock:
                self.renewals.append(RenewCall(started, time.monotonic(), fault, error))

    def _begin(self, fault: Fault | None) -> None:
        if fault == FAIL:
            self._proxy.drop()
        elif isinstance(fault, Slow):
            self._proxy.delay(fault.seconds)
        elif isinstance(fault, LateReply):
            self._proxy.delay_replies(fault.seconds)
        elif isinstance(fault, Hang) or fault == DEAD:
            self._proxy.blackhole()

    # -- the rest of the Store protocol, passed through -------------------------
    @property
    def clock_skew(self) -> float:
        return float(getattr(self._store, "clock_skew", 0.0))

    def setup(self) -> None:
        self._store.setup()

    def acquire(self, name: str, ttl: float = 30.0) -> Lease | None:
        lease = self._store.acquire(name, ttl)
        if lease is not None:
            with self._lock:
                self.grants.append(lease)
        return lease

    def release(self, lease: Lease) -> bool:
        return self._store.release(lease)

    def complete(self, lease: Lease, keep: float = 86400.0, *, expire: bool = False) -> bool:
        return self._store.complete(lease, keep, expire=expire)

    def inspect(self, name: str) -> LeaseState | None:
        return self._store.inspect(name)

    def queue(self, name: str) -> Any:
        return self._store.queue(name)

    def close(self) -> None:
        self._store.close()
