"""EndpointGate on every store: one store call to admit, one to release,
whatever the cap and however full; the cap it is given applies to the next
admission (lowered below the requests in flight: nobody until they fall below
it; raised: at once), as a subscription update does between attempts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import onceonly
from onceonly_app.webhooks import subscriptions
from onceonly_app.webhooks.endpoint_limits import EndpointGate
from tests.support.delivery.held_deliveries import LOCAL, new_tenant

RATE = 10000.0  # the rate never holds an attempt back here


class CountedStore:
    """The store, with its calls counted by method name."""

    def __init__(self, store: onceonly.Store) -> None:
        self._store = store
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return method(*args, **kwargs)

        return counted


@pytest.fixture
def endpoint(webhook_db: str) -> str:
    with psycopg.connect(webhook_db, autocommit=True) as conn:
        return subscriptions.add(conn, new_tenant(conn), "http://127.0.0.1:9/", max_in_flight=2,
                                 allow_http_hosts=LOCAL).id


@pytest.fixture
def gate(webhook_db: str, store: onceonly.Store) -> Iterator[tuple[EndpointGate, CountedStore]]:
    counted = CountedStore(store)
    with ConnectionPool(webhook_db, min_size=0, max_size=2, open=True) as pool:
        yield EndpointGate(counted, pool, 30.0), counted  # type: ignore[arg-type]


def test_one_call_to_admit_and_one_to_release(gate: tuple[EndpointGate, CountedStore], endpoint: str) -> None:
    gate_, store = gate
    with gate_.admit(endpoint, 1000, RATE) as admitted:
        assert admitted
        assert store.calls == Counter({"take_permits": 1})
    assert store.calls == Counter({"take_permits": 1, "return_permit": 1})


def test_a_cap_changed_in_flight_applies_to_the_next_admission(gate: tuple[EndpointGate, CountedStore],
                                                                endpoint: str) -> None:
    gate_, store = gate
    with gate_.admit(endpoint, 2, RATE) as first, gate_.admit(endpoint, 2, RATE) as second:
        assert first and second
        with gate_.admit(endpoint, 2, RATE) as full:
            assert not full and full.limit == "in_flight"
        with gate_.admit(endpoint, 1, RATE) as lowered:
            assert not lowered and lowered.limit == "in_flight"
        with gate_.admit(endpoint, 3, RATE) as raised:
            assert raised
    with gate_.admit(endpoint, 1, RATE) as after:  # every permit was returned
        assert after
    # six admissions, four of them admitted: one call each to admit, one to release
    assert store.calls == Counter({"take_permits": 6, "return_permit": 4})


def test_requests_admitted_together_cost_one_store_call(gate: tuple[EndpointGate, CountedStore], endpoint: str,
                                                        webhook_db: str) -> None:
    """admit_many: one take_permits for every request, one statement for their
    tokens; a request held back by the rate gives its permit back at once."""
    gate_, store = gate
    with psycopg.connect(webhook_db, autocommit=True) as conn:
        tenant = new_tenant(conn)
        other, slow = (subscriptions.add(conn, tenant, "http://127.0.0.1:9/", allow_http_hosts=LOCAL).id
                       for _ in range(2))
    with gate_.admit(slow, 5, 1.0) as first:  # takes the slow endpoint's one token of its first second
        assert first
    store.calls.clear()
    admissions = gate_.admit_many([(endpoint, 2, RATE), (other, 5, RATE), (endpoint, 2, RATE), (endpoint, 2, RATE),
                                   (slow, 5, 1.0)])
    assert [(a.admitted, a.limit) for a in admissions] == [(True, None), (True, None), (True, None),
                                                           (False, "in_flight"), (False, "rate")]
    assert store.calls == Counter({"take_permits": 1, "return_permit": 1})  # the rate-held one's permit
    for admission in admissions:
        gate_.release(admission)
        gate_.release(admission)  # once only
    assert store.calls == Counter({"take_permits": 1, "return_permit": 4})
    with gate_.admit(endpoint, 2, RATE) as again, gate_.admit(endpoint, 2, RATE) as twice:
        assert again and twice  # every permit was given back
