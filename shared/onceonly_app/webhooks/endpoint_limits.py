"""Per-endpoint limits: at most ``max_in_flight`` requests at once and
``rate_per_second`` requests a second to one subscription, across every
invocation of every function (docs/webhooks.md, "Per-endpoint limits").

- **In flight**: ``max_in_flight`` lease slots ``endpoint:<id>:slot:<i>`` in the
  coordination store (onceonly's acquire: one atomic grant each). An attempt
  holds one slot for its request; a crashed holder's slot comes back when its
  lease (the attempt's whole budget) runs out.
- **Rate**: a token bucket per subscription in the domain database
  (endpoint_limits.sql, take_rate_token: one statement under the row's lock),
  holding at most one second's worth of tokens.

An attempt that gets no slot or no token is not made: the caller delays the
delivery (service.py) without using up an attempt, until the endpoint can
next admit it (:meth:`EndpointGate.held_back_until`):

- **rate**: its turn, the bucket's next token time after every delivery
  already waiting (reserve_rate_turn), so a backlog comes back one token
  apart instead of all at once to an empty bucket;
- **in flight**: a delay that doubles with each time the delivery was held
  back (IN_FLIGHT_DELAY, with jitter), since when a slot frees is unknown.

The rate has a floor (MIN_RATE, one request a minute): below it a backlog
would wait for ever. A delivery held back past DEFER_RETENTION ends expired."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from onceonly import Lease, Store
from onceonly.errors import StoreUnavailableError
from onceonly.stores.sqlfile import load_queries

SQL = load_queries(Path(__file__).with_suffix(".sql"))
DEFAULT_MAX_IN_FLIGHT = 10
DEFAULT_RATE_PER_SECOND = 50.0
MIN_RATE = 1 / 60  # requests per second: one a minute (the table's CHECK says the same)
# Seconds until a delivery held back by a full in-flight cap is due again: the
# first value, doubled each time it is held back again, at most the second;
# times 1-1.5 (jitter), so held-back replicas do not come back in lockstep.
IN_FLIGHT_DELAY = (0.2, 30.0)
HELD_BACK_DELAY = (IN_FLIGHT_DELAY[0], IN_FLIGHT_DELAY[0] * 1.5)  # the first delay's range
DEFER_RETENTION = 7 * 24 * 3600.0  # seconds an event may wait for its endpoint's limit before it expires


@dataclass(frozen=True)
class Admission:
    """What the gate said: admitted, or which limit held the request back."""

    admitted: bool
    limit: str | None = None  # "in_flight" | "rate" when held back

    def __bool__(self) -> bool:
        return self.admitted


def effective_rate(rate_per_second: float) -> float:
    """The rate applied: never below the floor (a row from before it existed)."""
    return max(float(rate_per_second), MIN_RATE)


def slot_name(webhook_id: str, slot: int) -> str:
    return f"endpoint:{webhook_id}:slot:{slot}"


class EndpointGate:
    """Admits one request to an endpoint within its limits, or says no."""

    def __init__(self, store: Store, pool: ConnectionPool, slot_ttl: float, rng: random.Random | None = None,
                 log: Any = None) -> None:
        self.store = store
        self.pool = pool
        self.slot_ttl = slot_ttl  # outlasts the request: the attempt's whole budget
        self.rng = rng or random.Random()
        self.log = log

    def in_flight_delay(self, deferrals: int) -> float:
        """Seconds to wait after the in-flight cap held a delivery back for the
        (``deferrals`` + 1)th time: doubling, capped, jittered upwards only, so
        each wait is longer than the one before until the cap."""
        first, most = IN_FLIGHT_DELAY
        return min(first * 2 ** min(deferrals, 32), most) * self.rng.uniform(1.0, 1.5)

    def held_back_until(self, webhook_id: str, admission: Admission, rate_per_second: float,
                        deferrals: int, now: float) -> float:
        """When a request ``admission`` held back is due again (epoch seconds)."""
        if admission.limit == "rate":
            turn = self._run_one("reserve_rate_turn", {"webhook_id": webhook_id,
                                                       "rate": effective_rate(rate_per_second)})
            return now if turn is None else max(now, float(turn["turn"]))
        return now + self.in_flight_delay(deferrals)

    @contextmanager
    def admit(self, webhook_id: str, max_in_flight: int, rate_per_second: float) -> Iterator[Admission]:
        """Yield an admitted Admission holding one in-flight slot and one rate
        token of ``webhook_id``, released on exit; else (nothing held) one that
        names the limit the endpoint is at."""
        lease = self._slot(webhook_id, max_in_flight)
        if lease is None:
            yield Admission(False, "in_flight")
            return
        try:
            if not self._token(webhook_id, rate_per_second):
                yield Admission(False, "rate")
                return
            yield Admission(True)
        finally:
            self._release(lease)

    def _slot(self, webhook_id: str, max_in_flight: int) -> Lease | None:
        # From a random slot on, so concurrent attempts do not all contend on slot 0.
        first = self.rng.randrange(max_in_flight)
        for n in range(max_in_flight):
            lease = self.store.acquire(slot_name(webhook_id, (first + n) % max_in_flight), ttl=self.slot_ttl)
            if lease is not None:
                return lease
        return None

    def _token(self, webhook_id: str, rate_per_second: float) -> bool:
        return self._run_one("take_rate_token", {"webhook_id": webhook_id,
                                                 "rate": effective_rate(rate_per_second)}) is not None

    def _run_one(self, name: str, params: dict[str, Any]) -> dict[str, Any] | None:
        try:
            with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
                return cur.execute(SQL[name], params).fetchone()
        except psycopg.OperationalError as exc:
            raise StoreUnavailableError(f"domain database unavailable ({name}): "
                                        f"{exc.__class__.__name__}") from exc

    def _release(self, lease: Lease) -> None:
        try:
            self.store.release(lease)
        except StoreUnavailableError:
            # The slot comes back when its lease runs out; the outcome is recorded regardless.
            if self.log is not None:
                self.log.warning("endpoint slot not released; it frees when its lease ends",
                                 extra={"lease": lease.name, "token": lease.token})
