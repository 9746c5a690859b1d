"""One deadline for a whole DynamoDB call. A claim, put_many
or ack_many of many items sends many requests, 16 at a time; when the link dies
in the middle, the call must still end within its ``timeout``, not after one
timeout per wave of requests (the old code took 13.5 s for claim(limit=160) at
timeout=2). On dynalite behind a FaultProxy that goes dark at the call's first
write; bounds are asserted generously (2 x timeout + 2 s) so that a loaded
machine does not flake them."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import onceonly
from onceonly.dynamodb import MAX_CONCURRENT_WRITES, DynamoDBStore
from tests.support.servers.faultproxy import FaultProxy
from tests.support.servers.proxied import target_port, through

TIMEOUT = 3.9  # one attempt per request (under 4 s): 1.3 s connect + 2.6 s read
ITEMS = 160  # ten waves of MAX_CONCURRENT_WRITES
# The caller stops waiting at the deadline; this is for the scheduler of a loaded machine.
WAKE_UP = 1.0


def generous(timeout: float) -> float:
    return 2 * timeout + 2


class Link:
    """The proxied store's requests as they leave (after the store's own
    before-send hook let them go), and the end of each attempt."""

    def __init__(self, store: DynamoDBStore) -> None:
        self._lock = threading.Lock()
        self.sent: list[tuple[float, str, str]] = []  # (when, operation, item key)
        self.attempt_ends: list[float] = []
        self._fault: tuple[str, Callable[[], None]] | None = None
        self._events = store._client.meta.events
        self._events.register("before-send.dynamodb", self._on_send)
        self._events.register("needs-retry.dynamodb", self._on_attempt_end)

    def on_first(self, operation: str, fault: Callable[[], None]) -> None:
        """Apply ``fault`` to the link just before the first ``operation`` leaves."""
        self._fault = (operation, fault)

    def ignore_per_request_read_timeouts(self) -> None:
        """Behave like a botocore from before
        https://github.com/boto/botocore/issues/3770, which keeps the
        client's read timeout whatever the request context says."""
        def keep_the_clients(request: Any, **_: Any) -> None:
            request.context.pop("read_timeout", None)

        self._events.register("before-send.dynamodb", keep_the_clients)

    def _on_send(self, request: Any, event_name: str, **_: Any) -> None:
        operation = event_name.rpartition(".")[2]
        key = json.loads(request.body or b"{}").get("Key", {}).get("pk", {}).get("S", "")
        with self._lock:
            self.sent.append((time.monotonic(), operation, key))
            if self._fault is not None and self._fault[0] == operation:
                self._fault[1]()
                self._fault = None

    def _on_attempt_end(self, **_: Any) -> None:
        with self._lock:
            self.attempt_ends.append(time.monotonic())

    def sends(self, operation: str) -> list[tuple[float, str, str]]:
        with self._lock:
            return [s for s in self.sent if s[1] == operation]


@pytest.fixture
def timeout() -> float:
    return TIMEOUT


@pytest.fixture
def direct(dynamodb_url: str) -> Iterator[onceonly.Store]:
    store = onceonly.connect(f"{dynamodb_url}&shards=1")
    store.setup()
    yield store
    store.close()


@pytest.fixture
def proxy(dynamodb_url: str) -> Iterator[FaultProxy]:
    with FaultProxy(target_port(dynamodb_url)) as p:
        yield p


@pytest.fixture
def proxied(dynamodb_url: str, proxy: FaultProxy, direct: onceonly.Store, timeout: float) -> Iterator[DynamoDBStore]:
    store = onceonly.connect(through(f"{dynamodb_url}&shards=1", proxy.port, timeout))
    assert isinstance(store, DynamoDBStore)
    yield store
    proxy.passthrough()
    store.close()


@pytest.fixture
def link(proxied: DynamoDBStore) -> Link:
    return Link(proxied)


def fails_within(call: Callable[[], Any], bound: float) -> tuple[onceonly.StoreUnavailableError, float, float]:
    """The error ``call`` raises, when it started and how long it took (at most ``bound``)."""
    started = time.monotonic()
    with pytest.raises(onceonly.StoreUnavailableError) as caught:
        call()
    elapsed = time.monotonic() - started
    assert elapsed <= bound, f"took {elapsed:.1f} s, bound {bound:g} s"
    return caught.value, started, elapsed


def due_items(store: onceonly.Store, queue: str, count: int = ITEMS) -> None:
    store.queue(queue).put_many((f"i{i:03}", time.time() - 1, i) for i in range(count))


@pytest.mark.parametrize(
    ("timeout", "per_request_read_timeouts"),
    [(TIMEOUT, True), (TIMEOUT, False), (6.0, True)],
    ids=["one-attempt", "old-botocore", "two-attempts"],
)
def test_claim_whose_link_dies_mid_claim_fails_at_its_deadline_and_sends_nothing_after_it(
    direct: onceonly.Store, proxied: DynamoDBStore, proxy: FaultProxy, link: Link, unique: str,
    timeout: float, per_request_read_timeouts: bool,
) -> None:
    due_items(direct, unique)
    if not per_request_read_timeouts:
        link.ignore_per_request_read_timeouts()
    link.on_first("UpdateItem", proxy.blackhole)  # the query is answered, then the link goes dark
    error, started, elapsed = fails_within(lambda: proxied.queue(unique).claim(limit=ITEMS, lease=60),
                                           generous(timeout))
    assert elapsed <= timeout + WAKE_UP, "the caller waited for requests past the deadline"
    assert "returns to the queue when its lease ends" in str(error)
    time.sleep(timeout)  # what the call might still send, it would send now
    sends = link.sends("UpdateItem")
    assert max(when for when, _, _ in sends) <= started + timeout + 0.1, "a request (or retry) left after the deadline"
    # "not sent" is never said of a write that left, and said of all the queued ones.
    (not_sent,) = map(int, re.findall(r"(\d+) not sent", str(error)))
    assert ITEMS - 4 * MAX_CONCURRENT_WRITES <= not_sent <= ITEMS - len({key for _, _, key in sends})
    if per_request_read_timeouts:  # each request waited for its reply no longer than the call had left
        assert max(link.attempt_ends) <= started + timeout + 0.5, "a request outlived the call's deadline"
    proxy.passthrough()
    assert len(direct.queue(unique).claim(limit=ITEMS, lease=60)) == ITEMS  # nothing was granted in the dark


def test_claim_whose_replies_are_lost_gives_its_items_back_when_the_lease_ends(
    direct: onceonly.Store, proxied: DynamoDBStore, proxy: FaultProxy, link: Link, unique: str
) -> None:
    """The writes reach DynamoDB and grant their items, but no reply comes back:
    grants the caller never sees. They are held by nobody until the lease that
    the call fixed at its start runs out, then claimable again, attempt 2."""
    lease = 2 * TIMEOUT
    due_items(direct, unique)
    link.on_first("UpdateItem", proxy.lose_replies)
    _, started, _ = fails_within(lambda: proxied.queue(unique).claim(limit=ITEMS, lease=lease), generous(TIMEOUT))
    proxy.passthrough()
    queue = direct.queue(unique)
    never_sent = queue.claim(limit=ITEMS, lease=60)  # still due: their writes never left
    granted_in_the_dark = ITEMS - len(never_sent)
    assert granted_in_the_dark >= MAX_CONCURRENT_WRITES
    assert all(c.attempt == 1 for c in never_sent)
    assert queue.claim(limit=ITEMS, lease=60) == []  # the others are held, by nobody
    time.sleep(max(0.0, started + lease + 0.5 - time.monotonic()))
    back = queue.claim(limit=ITEMS, lease=60)
    assert len(back) == granted_in_the_dark and all(c.attempt == 2 for c in back)
    assert {c.item_id for c in never_sent} | {c.item_id for c in back} == {f"i{i:03}" for i in range(ITEMS)}


def test_put_many_whose_link_dies_fails_within_the_timeout(
    direct: onceonly.Store, proxied: DynamoDBStore, proxy: FaultProxy, link: Link, unique: str
) -> None:
    items = 2 * ITEMS
    # dynalite refuses the transaction, so the puts go item by item, 16 at a time.
    link.on_first("UpdateItem", proxy.blackhole)
    error, _, _ = fails_within(lambda: proxied.queue(unique).put_many((f"i{i:03}", None, i) for i in range(items)),
                               generous(TIMEOUT))
    assert f"of {items} writes answered" in str(error) and "put_many again writes them all" in str(error)
    assert len(link.sends("UpdateItem")) <= 2 * MAX_CONCURRENT_WRITES


def test_ack_many_whose_link_dies_fails_within_the_timeout(
    direct: onceonly.Store, proxied: DynamoDBStore, proxy: FaultProxy, link: Link, unique: str
) -> None:
    due_items(direct, unique)
    claims = direct.queue(unique).claim(limit=ITEMS, lease=60)
    assert len(claims) == ITEMS
    link.on_first("DeleteItem", proxy.blackhole)
    error, _, _ = fails_within(lambda: proxied.queue(unique).ack_many(claims), generous(TIMEOUT))
    assert f"of {ITEMS} writes answered" in str(error) and "may have been applied" in str(error)
    proxy.passthrough()
    assert direct.queue(unique).ack_many(claims) == [True] * ITEMS  # nothing was acked in the dark
