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
delivery (service.py) without using up an attempt."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from onceonly import Lease, Store
from onceonly.errors import StoreUnavailableError
from onceonly.stores.sqlfile import load_queries

SQL = load_queries(Path(__file__).with_suffix(".sql"))
DEFAULT_MAX_IN_FLIGHT = 10
DEFAULT_RATE_PER_SECOND = 50.0
HELD_BACK_DELAY = (0.2, 0.6)  # seconds (uniform) until a held-back delivery is due again


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

    def held_back_delay(self) -> float:
        return self.rng.uniform(*HELD_BACK_DELAY)

    @contextmanager
    def admit(self, webhook_id: str, max_in_flight: int, rate_per_second: float) -> Iterator[bool]:
        """Yield True holding one in-flight slot and one rate token of
        ``webhook_id``, released on exit; False (nothing held) when the endpoint
        is at either limit."""
        lease = self._slot(webhook_id, max_in_flight)
        if lease is None:
            yield False
            return
        try:
            if not self._token(webhook_id, rate_per_second):
                yield False
                return
            yield True
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
        try:
            with self.pool.connection() as conn:
                row = conn.execute(SQL["take_rate_token"], {"webhook_id": webhook_id,
                                                            "rate": rate_per_second}).fetchone()
        except psycopg.OperationalError as exc:
            raise StoreUnavailableError(f"domain database unavailable (take_rate_token): "
                                        f"{exc.__class__.__name__}") from exc
        return row is not None

    def _release(self, lease: Lease) -> None:
        try:
            self.store.release(lease)
        except StoreUnavailableError:
            # The slot comes back when its lease runs out; the outcome is recorded regardless.
            if self.log is not None:
                self.log.warning("endpoint slot not released; it frees when its lease ends",
                                 extra={"lease": lease.name, "token": lease.token})
