"""The counting semaphore under a race, on every store (and a Redis Cluster,
and PostgreSQL behind a transaction-mode PgBouncer): 8 processes, each
connected before one barrier, take, hold and return permits of one semaphore
with a limit of 3; their recorded holdings never number more than 3 at once.
run_workers fails unless at least two workers held a permit."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import onceonly
from tests.onceonly.concurrency import store_workers
from tests.support.races.lease_history import peak_holders
from tests.support.races.race import run_workers

pytestmark = [pytest.mark.concurrency, pytest.mark.processes]
WORKERS = 8
LIMIT = 3
ROUNDS = 40


@pytest.mark.parametrize("store_url", ["postgres", "postgres_pgbouncer", "redis", "redis_cluster", "dynamodb"],
                         indirect=True)
@pytest.mark.parametrize(("ttl", "abandon"), [(30.0, 0.0), (0.2, 0.25)], ids=["returned", "some-abandoned"])
def test_holders_never_exceed_the_limit(store: onceonly.Store, store_url: str, unique: str, tmp_path: Path,
                                        ttl: float, abandon: float) -> None:
    """``some-abandoned``: a quarter of the permits are never returned (their
    holders 'crash') and end after 0.2 s, so takes race to evict them (on
    DynamoDB: the read + eviction write)."""
    history = run_workers(store_workers.hold_permits, WORKERS, tmp_path, store_url, unique, LIMIT, ROUNDS,
                          ttl, abandon, won=lambda e: e["event"] == "held")
    held = [e for e in history if e["event"] == "held"]
    peak = peak_holders(held)
    assert peak <= LIMIT, f"{peak} permits held at once, limit {LIMIT}"
    assert len({e["holder"] for e in held}) == len(held), "a holder id was handed out twice"
    assert any(e["event"] == "full" for e in history), "no take found the semaphore full: no race happened"
    assert peak >= 2, "the holdings never overlapped: the workers did not race"
    assert all(e["returned"] for e in held if e["returned"] is not None), "a live permit's return was refused"
    if abandon:
        assert any(e["returned"] is None for e in held), "no permit was abandoned"
        time.sleep(ttl + 0.1)  # the abandoned ones end
    # every permit was returned or ended: the whole limit is free again
    assert [store.take_permit(unique, LIMIT, ttl=30) is not None for _ in range(LIMIT + 1)] == [True] * LIMIT + [False]



@pytest.mark.parametrize("store_url", ["postgres", "postgres_pgbouncer", "redis"], indirect=True)
def test_takes_and_returns_of_several_semaphores_never_exceed_a_limit(
        store: onceonly.Store, store_url: str, unique: str, tmp_path: Path) -> None:
    """take_permits and return_permits over three semaphores in shuffled
    orders, one sometimes asked for twice (PostgreSQL: one statement each,
    locking their rows): each semaphore's holdings stay within its limit, and
    no two callers deadlock (a deadlock would fail a worker)."""
    names = [f"{unique}-{n}" for n in range(3)]
    history = run_workers(store_workers.hold_permit_sets, WORKERS, tmp_path, store_url, names, LIMIT, ROUNDS,
                          won=lambda e: e["event"] == "held")
    held = [e for e in history if e["event"] == "held"]
    for name in names:
        peak = peak_holders([e for e in held if e["name"] == name])
        assert peak <= LIMIT, f"{peak} permits of {name} held at once, limit {LIMIT}"
        assert peak >= 2, f"the holdings of {name} never overlapped: the workers did not race"
    assert any(e["event"] == "full" for e in history), "no take found a semaphore full: no race happened"
    assert all(e["returned"] for e in held), "a live permit's return was refused"
    assert [store.take_permit(name, LIMIT, ttl=30) is not None for name in names for _ in range(LIMIT)] \
        == [True] * (LIMIT * len(names)), "a place was left taken"
