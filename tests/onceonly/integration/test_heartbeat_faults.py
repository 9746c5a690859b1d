"""The tick's heartbeat against renewals that fail, are slow or hang, on
PostgreSQL, Redis and DynamoDB (dynalite), each reached through a
FaultProxy (tests/support/stores/faulty_renewals.py scripts the faults per renewal).

The template's ratio, scaled down by 10: a 30 s tick lease and a 10 s store
timeout become TTL = 3 s and STORE_TIMEOUT = 1 s; the heartbeat keeps its
default, a third of the lease. Meanwhile duplicate deliveries of the tick
arrive every 50 ms on a direct connection (another Lambda container):

- a store hiccup the lease can ride out (two renewals failing in a row, slow
  renewals, one renewal hanging for the whole store timeout): the lease never
  lapses (checked on the store's own clock, from the grants it reported), no
  duplicate runs, and the first run is never told it lost;
- the link dies for good: the first run is told it lost the tick (tick.lost,
  wait_lost, on_lost) no later than its lease's end, so the duplicate that
  takes the tick with token 2 finds it already told.

A heartbeat that waits an interval after each renewal returns (the old
schedule) lets the lease lapse after two failures or one hang, and never tells
the body: these tests fail on it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

import onceonly
from onceonly.scheduled import scheduled_time_of, tick_lock_name
from tests.support.servers.faultproxy import FaultProxy
from tests.support.servers.proxied import target_port, through
from tests.support.stores.faulty_renewals import DEAD, FAIL, Fault, FaultyRenewals, Hang, LateReply, Slow

# A heartbeat must tell its body within a few tens of ms: never beside an
# eight-process race, whose load alone delays a thread by more.
pytestmark = pytest.mark.timing

SCALE = 0.1
TTL = 30 * SCALE
STORE_TIMEOUT = 10 * SCALE
INTERVAL = TTL / 3  # the guard's default heartbeat
BODY_SECONDS = 1.6 * TTL  # long enough for the faults and a lease's worth after them
EVENT = {"source": "aws.events", "detail-type": "Scheduled Event", "id": "delivery-1",
         "time": "2026-12-01T02:00:00Z", "detail": {}}


class Duplicates:
    """Duplicate deliveries of the tick every 50 ms, on their own store, from
    when the first run has the tick (``begin()``) until the block ends. A
    duplicate that runs records its token and whether the first run had
    already been told it lost the tick."""

    def __init__(self, store: onceonly.Store, job: str, first: list[onceonly.Tick]) -> None:
        self.first = first
        self.runs: list[tuple[int, bool]] = []
        self.ran = threading.Event()
        self._handler = onceonly.scheduled(store, job=job, ttl=TTL)(self._body)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._deliver, name="duplicates", daemon=True)

    def _body(self, event: Any, context: Any, tick: onceonly.Tick) -> None:
        self.runs.append((tick.token, self.first[0].lost))
        self.ran.set()

    def _deliver(self) -> None:
        while not self._stop.wait(0.05):
            self._handler(EVENT, None)

    def begin(self) -> None:
        self._thread.start()

    def __enter__(self) -> Duplicates:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)


@pytest.fixture
def link(store_url: str) -> Iterator[tuple[str, FaultProxy, onceonly.Store]]:
    """(the store's URL through a fault proxy, the proxy, a direct store).
    DynamoDB's assumed clock skew is scaled like the rest (1 s -> 0.1 s)."""
    if store_url.startswith("dynamodb"):
        store_url = f"{store_url}&clock_skew={1.0 * SCALE:g}"
    direct = onceonly.connect(store_url)
    direct.setup()
    with FaultProxy(target_port(store_url)) as proxy:
        yield through(store_url, proxy.port, STORE_TIMEOUT), proxy, direct
    direct.close()


def assert_never_lapsed(grants: Sequence[onceonly.Lease], ended_at: float) -> None:
    """Each renewal reached the store before the lease it extended had ended,
    and the last one outlived the body: on the store's clock (a renewal sets
    the end to the store's now + TTL)."""
    assert len(grants) >= 3, f"too few renewals to prove anything: {grants}"
    for before, after in zip(grants, grants[1:], strict=False):
        renewed_at = after.expires_at - TTL
        assert renewed_at < before.expires_at, (
            f"the lease lapsed for {renewed_at - before.expires_at:.3f} s before a renewal reached the store")
    assert grants[-1].expires_at > ended_at, "the lease had ended before the body did"


def run_first(url: str, proxy: FaultProxy, faults: Sequence[Fault], job: str, ticks: list[onceonly.Tick],
              body: Callable[[onceonly.Tick], Any]) -> tuple[dict[str, Any], FaultyRenewals]:
    """The first delivery of the tick, through the faulty link; its Tick is put in ``ticks``."""
    store = FaultyRenewals(onceonly.connect(url), proxy, faults)

    def first(event: Any, context: Any, tick: onceonly.Tick) -> Any:
        ticks.append(tick)
        return body(tick)

    try:
        return onceonly.scheduled(store, job=job, ttl=TTL)(first)(EVENT, None), store
    finally:
        store.close()


SURVIVABLE = {
    "two-failing-renewals": [FAIL, FAIL],
    # every chunk 0.1 s late: a renewal takes 0.2-0.4 s (an HTTP request may be
    # two chunks), under each driver's reply bound (DynamoDB's: 0.67 s here)
    "slow-renewals": [Slow(0.1 * STORE_TIMEOUT)] * 3,
    "one-renewal-hangs-for-the-store-timeout": [Hang(STORE_TIMEOUT)],
}


@pytest.mark.parametrize("faults", SURVIVABLE.values(), ids=SURVIVABLE.keys())
def test_a_hiccup_shorter_than_the_lease_keeps_it(
        link: tuple[str, FaultProxy, onceonly.Store], faults: list[Fault], unique: str) -> None:
    url, proxy, direct = link
    first: list[onceonly.Tick] = []
    lost_at: list[float] = []
    ended: list[float] = []

    def body(tick: onceonly.Tick) -> str:
        tick.on_lost(lambda: lost_at.append(time.time()))
        duplicates.begin()
        told = tick.wait_lost(BODY_SECONDS)
        ended.append(time.time())
        return "told it lost" if told else "done"

    with Duplicates(direct, unique, first) as duplicates:
        outcome, store = run_first(url, proxy, faults, unique, first, body)

    scripted = [call for call in store.renewals if call.fault is not None]
    assert len(scripted) == len(faults), "every scripted fault met a renewal"
    if faults[0] == FAIL:
        assert all(isinstance(c.error, onceonly.StoreUnavailableError) for c in scripted), \
            [repr(c.error) for c in scripted]  # what a dropped link's renewal raised instead
    elif isinstance(faults[0], Hang):
        assert isinstance(scripted[0].error, onceonly.StoreUnavailableError)
        assert scripted[0].ended - scripted[0].started >= STORE_TIMEOUT
    else:  # slow, and answered
        assert all(c.error is None and c.ended - c.started >= 2 * faults[0].seconds for c in scripted)
    assert lost_at == [] and not first[0].lost
    assert duplicates.runs == []
    # the one grant, kept by its renewals: nobody else was granted the tick
    assert outcome["status"] == "ran" and outcome["token"] == store.grants[0].token and outcome["result"] == "done"
    assert_never_lapsed(store.grants, ended[0])


def lose_the_link(link: tuple[str, FaultProxy, onceonly.Store], unique: str, faults: Sequence[Fault],
                  told_within: float) -> tuple[dict[str, Any], FaultyRenewals, list[float], Duplicates]:
    """The first run, its renewals meeting ``faults`` (the last one DEAD), with
    duplicates arriving: its body waits to be told it lost the tick, then for
    a duplicate to take it, then restores the link (so the guard's completion
    is refused, not timed out). (outcome, its store, when it was told, the
    duplicates)."""
    url, proxy, direct = link
    first: list[onceonly.Tick] = []
    lost_at: list[float] = []

    def body(tick: onceonly.Tick) -> str:
        tick.on_lost(lambda: lost_at.append(time.time()))
        duplicates.begin()
        assert tick.wait_lost(told_within), "never told the lease was lost"
        assert duplicates.ran.wait(2 * TTL), "no duplicate took the tick"
        proxy.passthrough()
        wait_until_answering(tick)
        return "stale work"

    with Duplicates(direct, unique, first) as duplicates:
        outcome, store = run_first(url, proxy, faults, unique, first, body)
    return outcome, store, lost_at, duplicates



def test_a_dead_link_tells_the_body_before_a_duplicate_takes_the_tick(
        link: tuple[str, FaultProxy, onceonly.Store], unique: str) -> None:
    direct = link[2]
    outcome, store, lost_at, duplicates = lose_the_link(link, unique, [DEAD], told_within=2 * TTL)
    # Told no later than its lease's end, on the store's clock: the last grant
    # it got (the acquire: the first renewal already met the dead link).
    (granted,) = store.grants
    ((duplicate_token, told_first),) = duplicates.runs
    assert told_first, "the duplicate ran before the first run was told"
    assert duplicate_token > granted.token
    assert lost_at and lost_at[0] <= granted.expires_at
    assert all(call.error is not None for call in store.renewals)
    assert outcome["status"] == "superseded" and outcome["token"] == granted.token
    state = direct.inspect(tick_lock_name(unique, scheduled_time_of(EVENT)))
    assert state is not None and state.token == duplicate_token and state.completed


# Well past the heartbeat's drift allowance (1 % of TTL + 2 ms = 32 ms), well
# under each driver's reply bound (STORE_TIMEOUT / 2; DynamoDB's read timeout
# is per chunk).
LATE_REPLY = 0.3


def test_a_renewal_answered_late_then_a_dead_link_is_counted_from_its_send(
        link: tuple[str, FaultProxy, onceonly.Store], unique: str) -> None:
    """The first renewal is applied at once but its reply comes LATE_REPLY s
    later; then the link dies. The lease that renewal gave ends TTL after the
    store applied it: the body must be told by then. A heartbeat that counted
    the lease from the reply would tell it about LATE_REPLY s too late, after
    the duplicate could take the tick; the dead-link case alone leaves it
    only the 32 ms allowance to be caught in."""
    outcome, store, lost_at, duplicates = lose_the_link(link, unique, [LateReply(LATE_REPLY), DEAD],
                                                        told_within=3 * TTL)
    late, *dead = store.renewals
    assert late.error is None and late.ended - late.started >= LATE_REPLY, "the late renewal did not succeed late"
    assert dead and all(call.error is not None for call in dead)
    acquired, renewed = store.grants
    assert renewed.expires_at > acquired.expires_at
    assert lost_at and lost_at[0] <= renewed.expires_at, (
        f"told {lost_at[0] - renewed.expires_at:.3f} s after the renewed lease ended on the store's clock")
    ((duplicate_token, told_first),) = duplicates.runs
    assert told_first, "the duplicate ran before the first run was told"
    assert outcome["status"] == "superseded" and outcome["token"] == acquired.token < duplicate_token


def wait_until_answering(tick: onceonly.Tick) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            tick.store.inspect(tick.lock_name)
            return
        except onceonly.StoreUnavailableError:
            assert time.monotonic() < deadline, "the store never answered through the restored link"
            time.sleep(0.1)
