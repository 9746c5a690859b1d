"""Per-endpoint limits: at most ``max_in_flight`` requests at once and
``rate_per_second`` requests a second to one subscription, across every
invocation of every function (docs/webhooks.md, "Per-endpoint limits").

- **In flight**: a counting semaphore ``endpoint:<id>`` of ``max_in_flight``
  permits in the coordination store (onceonly's take_permit: one atomic
  operation to admit, one to release, whatever the cap). An attempt holds one
  permit for its request; a crashed holder's permit frees itself when its ttl
  (the attempt's whole budget) ends. A cap changed while requests are in
  flight applies to the next admission.
- **Rate**: a token bucket per subscription in the domain database
  (endpoint_limits.sql, take_rate_tokens: one statement under the row's lock),
  holding at most one second's worth of tokens.

Requests about to be made together (an SQS batch's first ones) are admitted
together (:meth:`EndpointGate.admit_many`): one take_permits call for their
permits and one statement for their tokens, whatever their number.

An attempt that gets no permit or no token is not made: the caller delays the
delivery (service.py) without using up an attempt, until the endpoint can
next admit it (:meth:`EndpointGate.held_back_until`):

- **rate**: its turn, the bucket's next token time after every delivery
  already waiting (reserve_rate_turn), so a backlog comes back one token
  apart instead of all at once to an empty bucket;
- **in flight**: a delay that doubles with each time the delivery was held
  back (IN_FLIGHT_DELAY, with jitter), since when a permit frees is unknown;
  at most a permit's ttl, within which every permit held then frees.

The rate has a floor (MIN_RATE, one request a minute): below it a backlog
would wait for ever. A delivery held back past DEFER_RETENTION ends expired."""

from __future__ import annotations

import contextlib
import logging
import queue
import random
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from onceonly import Permit, Store
from onceonly.errors import StoreUnavailableError
from onceonly_app.batching import distinct_rounds
from onceonly_app.sql_queries import load_queries

SQL = load_queries(Path(__file__).with_suffix(".sql"))
DEFAULT_MAX_IN_FLIGHT = 10
DEFAULT_RATE_PER_SECOND = 50.0
MIN_RATE = 1 / 60  # requests per second: one a minute (the table's CHECK says the same)
# Seconds until a delivery held back by a full in-flight cap is due again: the
# first value, doubled each time it is held back again, at most the second;
# times 1-1.5 (jitter), so held-back replicas do not come back in lockstep.
IN_FLIGHT_DELAY = (0.2, 30.0)
HELD_BACK_DELAY = (IN_FLIGHT_DELAY[0], IN_FLIGHT_DELAY[0] * 1.5)  # the first delay's range
LOG = logging.getLogger(__name__)
RETURNS_IDLE = 30.0  # seconds the returns thread waits for work before it ends
DEFER_RETENTION = 7 * 24 * 3600.0  # seconds an event may wait for its endpoint's limit before it expires


@dataclass
class Admission:
    """What the gate said: admitted (holding ``permit`` until released), or
    which limit held the request back."""

    admitted: bool
    limit: str | None = None  # "in_flight" | "rate" when held back
    permit: Permit | None = None  # while admitted and not yet released

    def __bool__(self) -> bool:
        return self.admitted


def effective_rate(rate_per_second: float) -> float:
    """The rate applied: never below the floor (a row from before it existed)."""
    return max(float(rate_per_second), MIN_RATE)


def semaphore_name(webhook_id: str) -> str:
    """The coordination store's semaphore that caps the endpoint's requests in flight."""
    return f"endpoint:{webhook_id}"


class PermitReturns:
    """Gives permits back on a thread of its own, all those waiting in one
    return_permits call, so that a batch's last request does not wait for
    its permit's return: the returns run while the batch records its
    outcomes, and :meth:`wait` (at the batch's end) sees them through.
    One per container (runtime.py): its thread lives as long as the process."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._waiting: queue.Queue[Permit] = queue.Queue()
        self._started = False
        self._starting = threading.Lock()

    def put(self, permit: Permit) -> None:
        with self._starting:  # held while putting: the thread leaves only with nothing waiting
            self._waiting.put(permit)
            if not self._started:
                threading.Thread(target=self._run, name="permit-returns", daemon=True).start()
                self._started = True

    def wait(self) -> None:
        """Returns once every permit put so far was given back (or failed to be)."""
        self._waiting.join()

    def _run(self) -> None:
        while True:
            try:
                permits = [self._waiting.get(timeout=RETURNS_IDLE)]
            except queue.Empty:
                with self._starting:
                    if self._waiting.empty():
                        self._started = False  # the next put starts a new thread
                        return
                continue
            with contextlib.suppress(queue.Empty):
                while True:
                    permits.append(self._waiting.get_nowait())
            try:
                self.store.return_permits(permits)
            except Exception as exc:  # noqa: BLE001 - each permit frees itself when its ttl ends
                LOG.warning("endpoint permits not returned; they free when their ttl ends",
                            extra={"permits": len(permits), "error": exc.__class__.__name__})
            finally:
                for _ in permits:
                    self._waiting.task_done()


class EndpointGate:
    """Admits one request to an endpoint within its limits, or says no."""

    def __init__(self, store: Store, pool: ConnectionPool, permit_ttl: float, rng: random.Random | None = None,
                 log: Any = None, returns: PermitReturns | None = None) -> None:
        self.store = store
        self.pool = pool
        self.permit_ttl = permit_ttl  # a permit's ttl; outlasts the request: the attempt's whole budget
        self.rng = rng or random.Random()
        self.log = log
        self.returns = returns or PermitReturns(store)

    def in_flight_delay(self, deferrals: int) -> float:
        """Seconds to wait after the in-flight cap held a delivery back for the
        (``deferrals`` + 1)th time: doubling, capped, jittered upwards only, so
        each wait is longer than the one before until the cap. The cap is at
        most a permit's ttl: by then every permit held when the delivery was
        refused has been given back or has expired, so a longer wait only
        leaves the endpoint idle."""
        first, most = IN_FLIGHT_DELAY
        most = max(first, min(most, self.permit_ttl))
        return min(first * 2 ** min(deferrals, 32), most) * self.rng.uniform(1.0, 1.5)

    def held_back_until(self, webhook_id: str, admission: Admission, rate_per_second: float,
                        deferrals: int, now: float) -> float:
        """When a request ``admission`` held back is due again (epoch seconds)."""
        if admission.limit == "rate":
            turns = self._run("reserve_rate_turn", {"webhook_id": webhook_id,
                                                    "rate": effective_rate(rate_per_second)})
            return max([now, *(float(turn["turn"]) for turn in turns)])
        return now + self.in_flight_delay(deferrals)

    def admit_many(self, wants: Sequence[tuple[str, int, float]]) -> list[Admission]:
        """An Admission per ``(webhook_id, max_in_flight, rate_per_second)``, in
        order: one store call takes every permit (take_permits), one statement
        the tokens of those that got one; a request with a permit and no token
        gives its permit back at once. Each admitted one holds its permit until
        :meth:`release`. A store outage raises, with every permit given back."""
        permits = self.store.take_permits([(semaphore_name(w), cap) for w, cap, _ in wants], ttl=self.permit_ttl)
        admissions = [Admission(False, "in_flight") for _ in wants]
        try:
            with_permit = [n for n, permit in enumerate(permits) if permit is not None]
            tokens = self._tokens([(wants[n][0], wants[n][2]) for n in with_permit])
        except BaseException:
            for permit in permits:
                if permit is not None:
                    self._release(permit)
            raise
        for n, token in zip(with_permit, tokens, strict=True):
            permit = permits[n]
            assert permit is not None  # with_permit
            admissions[n] = Admission(True, permit=permit) if token else Admission(False, "rate")
            if not token:
                self._release(permit)
        return admissions

    def release(self, admission: Admission, later: bool = False) -> None:
        """Give back the admission's permit, once: now, or ``later`` on the
        returns thread (``returns.wait()`` sees it through)."""
        permit, admission.permit = admission.permit, None
        if permit is not None:
            if later:
                self.returns.put(permit)
            else:
                self._release(permit)

    @contextmanager
    def admit(self, webhook_id: str, max_in_flight: int, rate_per_second: float,
              admitted: Admission | None = None, later: bool = False) -> Iterator[Admission]:
        """Yield an admitted Admission holding one in-flight permit and one rate
        token of ``webhook_id``, released on exit (``later``: see release);
        else (nothing held) one that names the limit the endpoint is at.
        ``admitted``: the request's admission from admit_many, used (and
        released) instead of a new one."""
        admission = admitted or self.admit_many([(webhook_id, max_in_flight, rate_per_second)])[0]
        try:
            yield admission
        finally:
            self.release(admission, later)

    def _tokens(self, wants: Sequence[tuple[str, float]]) -> list[bool]:
        """Whether each (webhook_id, rate) took a rate token: one statement (one
        more per repeat of a subscription)."""
        took = [False] * len(wants)
        for round_ in distinct_rounds([webhook_id for webhook_id, _ in wants]):
            rows = self._run("take_rate_tokens", {"webhook_ids": [wants[n][0] for n in round_],
                                                  "rates": [effective_rate(wants[n][1]) for n in round_]})
            taken = {row["webhook_id"] for row in rows}
            for n in round_:
                took[n] = wants[n][0] in taken
        return took

    def _run(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        try:
            with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
                return cur.execute(SQL[name], params).fetchall()
        except psycopg.OperationalError as exc:
            raise StoreUnavailableError(f"domain database unavailable ({name}): "
                                        f"{exc.__class__.__name__}") from exc

    def _release(self, permit: Permit) -> None:
        try:
            self.store.return_permit(permit)
        except StoreUnavailableError:
            # The permit frees itself when its ttl ends; the outcome is recorded regardless.
            if self.log is not None:
                self.log.warning("endpoint permit not returned; it frees when its ttl ends",
                                 extra={"semaphore": permit.name, "holder": permit.holder})
