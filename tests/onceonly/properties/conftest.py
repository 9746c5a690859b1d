"""The stores the model checks drive, each with the clock it runs on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import onceonly
from tests.onceonly.properties.machine import FakeClock, RealClock
from tests.support.servers.scratch import scratch_redis_prefix
from tests.support.stores.racy_store import RacyStore


@pytest.fixture
def clocked_store(store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[onceonly.Store, object]]:
    """The store of ``store_url`` and the clock its expiries run on: the real
    one for server-clock stores, a fake one for DynamoDB (client time)."""
    clock: RealClock | FakeClock = RealClock()
    store = onceonly.connect(store_url)
    if store_url.startswith("dynamodb"):
        clock = FakeClock()
        monkeypatch.setattr(store, "clock", clock.time)  # the store's injectable clock
    store.setup()
    yield store, clock
    store.close()


@pytest.fixture
def racy_store(redis_server_url: str) -> Iterator[RacyStore]:
    """The deliberately broken store, on a key prefix of its own."""
    with scratch_redis_prefix(redis_server_url, "racy") as url:
        store = RacyStore(url)
        yield store
        store.close()
