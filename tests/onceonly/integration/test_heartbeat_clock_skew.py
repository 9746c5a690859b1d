"""DynamoDB has no server clock: a contender decides by its own clock when a
lease has ended. With a contender's clock ahead by the skew the store assumes
(``clock_skew``, 1 s by default, what docs/coordination.md tells users to
assume), the holder whose link died must be told ``tick.lost`` (and its
on_lost callbacks) before that contender is granted the tick. Counting only
Redlock's drift allowance (1 % of the ttl + 2 ms), the contender got it about
a second before the holder was told.

On dynalite; the holder's renewals go through a fault proxy that goes dark
after the acquire; the contender polls from a store whose clock runs ahead."""

from __future__ import annotations

import threading
import time
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

import onceonly
from onceonly.dynamodb import DynamoDBStore
from onceonly.scheduled import scheduled_time_of, tick_lock_name
from onceonly.stores.dynamodb.options import DEFAULT_CLOCK_SKEW
from tests.support.servers.faultproxy import FaultProxy
from tests.support.servers.proxied import target_port, through
from tests.support.stores.faulty_renewals import DEAD, FaultyRenewals

# A heartbeat must tell its body within a few tens of ms: never beside an
# eight-process race, whose load alone delays a thread by more.
pytestmark = pytest.mark.timing

TTL = 6.0  # the holder's default heartbeat (2 s) fits under half of TTL - skew
STORE_TIMEOUT = 2.0
EVENT = {"source": "aws.events", "detail-type": "Scheduled Event", "id": "delivery-1",
         "time": "2026-12-01T02:00:00Z", "detail": {}}


def ahead_by(dynamodb_url: str, seconds: float) -> DynamoDBStore:
    parts = urlsplit(dynamodb_url)
    return DynamoDBStore.from_url(parts.netloc, dict(parse_qsl(parts.query)), clock=lambda: time.time() + seconds)


def test_a_holder_is_told_before_a_contender_ahead_by_the_assumed_skew_takes_the_tick(
        dynamodb_url: str, unique: str) -> None:
    setup = onceonly.connect(dynamodb_url)
    setup.setup()
    setup.close()
    name = tick_lock_name(unique, scheduled_time_of(EVENT))
    contender = ahead_by(dynamodb_url, DEFAULT_CLOCK_SKEW)
    assert contender.clock_skew == DEFAULT_CLOCK_SKEW
    granted: list[tuple[float, int]] = []  # (time.monotonic(), token)
    lost: list[float] = []
    stop = threading.Event()

    def contend() -> None:
        while not stop.is_set():
            lease = contender.acquire(name, ttl=TTL)
            if lease is not None:
                granted.append((time.monotonic(), lease.token))
                return
            time.sleep(0.01)

    racer = threading.Thread(target=contend, name="contender", daemon=True)

    def body(event: Any, context: Any, tick: onceonly.Tick) -> str:
        tick.on_lost(lambda: lost.append(time.monotonic()))
        racer.start()  # the link is dark from the first renewal on
        assert tick.wait_lost(2 * TTL), "never told the lease was lost"
        racer.join(2 * TTL)
        proxy.passthrough()
        return "stale"

    with FaultProxy(target_port(dynamodb_url)) as proxy:
        holder = FaultyRenewals(onceonly.connect(through(dynamodb_url, proxy.port, STORE_TIMEOUT)), proxy, [DEAD])
        try:
            outcome = onceonly.scheduled(holder, job=unique, ttl=TTL)(body)(EVENT, None)
        finally:
            stop.set()
            holder.close()
            contender.close()
    assert granted and granted[0][1] == 2, "the contender never took the tick over"
    assert lost and lost[0] <= granted[0][0], (
        f"the contender was granted the tick {lost[0] - granted[0][0]:.3f} s before the holder was told")
    assert outcome["status"] == "superseded" and outcome["token"] == 1


def test_a_tick_lease_too_short_for_the_assumed_skew_is_refused_before_anything_is_claimed(
        dynamodb_url: str, unique: str) -> None:
    store = onceonly.connect(dynamodb_url)  # clock_skew: the default, 1 s
    store.setup()
    ran: list[int] = []
    try:
        handler = onceonly.scheduled(store, job=unique, ttl=1.2)(lambda e, c, tick: ran.append(tick.token))
        try:
            handler(EVENT, None)
            raise AssertionError("a 1.2 s tick lease was accepted with 1 s of assumed skew")
        except onceonly.ConfigError as exc:
            assert "clock skew (1 s)" in str(exc) and "ttl (1.2 s)" in str(exc)
        assert ran == [] and store.inspect(tick_lock_name(unique, scheduled_time_of(EVENT))) is None
        # The same lease where the clients share a clock: accepted.
        same_clock = onceonly.connect(f"{dynamodb_url}&clock_skew=0")
        try:
            assert onceonly.scheduled(same_clock, job=unique, ttl=1.2)(
                lambda e, c, tick: ran.append(tick.token))(EVENT, None)["status"] == "ran"
        finally:
            same_clock.close()
        assert ran == [1]
    finally:
        store.close()
