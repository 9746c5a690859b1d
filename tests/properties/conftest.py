"""Hypothesis profiles for the model checks: a small one by default (CI), a
big one for the soak run. ``HYPOTHESIS_PROFILE=soak`` selects the big one for
every test here; the ``soak``-marked tests use it anyway."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

import onceonly
import onceonly.stores.dynamodb as dynamodb_store
from tests.properties.machine import FakeClock, RealClock
from tests.support.racy_store import RacyStore
from tests.support.scratch import scratch_redis_prefix

_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much]}
settings.register_profile("ci", max_examples=15, stateful_step_count=20, **_COMMON)
settings.register_profile("soak", max_examples=100, stateful_step_count=40, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def clocked_store(store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[onceonly.Store, object]]:
    """The store of ``store_url`` and the clock its expiries run on: the real
    one for server-clock stores, a fake one for DynamoDB (client time)."""
    clock: RealClock | FakeClock = RealClock()
    if store_url.startswith("dynamodb"):
        clock = FakeClock()
        monkeypatch.setattr(dynamodb_store, "time", clock)
    store = onceonly.connect(store_url)
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
