"""Multi-process races on every backend (real PostgreSQL, Redis, dynalite):
8 processes, each connected before one barrier, histories checked afterwards;
run_workers fails unless at least two workers won something."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest

import onceonly
from tests.onceonly.concurrency import store_workers
from tests.support.races.lease_history import check_holdings
from tests.support.races.race import run_workers

pytestmark = [pytest.mark.concurrency, pytest.mark.processes]
WORKERS = 8


@pytest.fixture
def ready_url(store_url: str) -> str:
    store = onceonly.connect(store_url)
    store.setup()
    store.close()
    return store_url


def test_each_name_is_granted_once(ready_url: str, unique: str, tmp_path: Path) -> None:
    names = [f"{unique}-{i}" for i in range(100)]
    history = run_workers(store_workers.acquire_each_once, WORKERS, tmp_path, ready_url, names,
                          won=lambda grant: True)
    granted = defaultdict(list)
    for event in history:
        granted[event["name"]].append(event)
    doubles = {name: grants for name, grants in granted.items() if len(grants) > 1}
    assert not doubles, f"names granted to two holders: {doubles}"
    assert sorted(granted) == sorted(names), "some name was never granted"
    assert {g[0]["grant"] for g in granted.values()} == {1}  # each name's first grant


def test_hot_names_are_never_held_twice_at_once(ready_url: str, unique: str, tmp_path: Path) -> None:
    names = [f"{unique}-hot-{i}" for i in range(3)]
    history = run_workers(store_workers.hold_hot_names, WORKERS, tmp_path, ready_url, names, 40,
                          won=lambda e: e["event"] == "held")
    # One after another, every acquire would find its name free (check_holdings asks for a contended one).
    held = check_holdings(history)
    assert len(held) >= 10, "too few grants to say anything"
    assert all(event["released"] for event in held), "a holder's release was refused"


def test_concurrent_claims_are_disjoint_and_complete(ready_url: str, unique: str, tmp_path: Path) -> None:
    queue = onceonly.connect(ready_url).queue(unique)
    items = [f"item-{i:04d}" for i in range(240)]
    for item in items:
        queue.put(item, payload={"i": item})
    history = run_workers(store_workers.drain_queue, WORKERS, tmp_path, ready_url, unique, 10,
                          won=lambda e: e["event"] == "claim")
    claims = [e for e in history if e["event"] == "claim"]
    acks = [e for e in history if e["event"] == "ack"]
    claimed = defaultdict(list)
    for c in claims:
        claimed[c["item"]].append(c["worker"])
    assert {i: w for i, w in claimed.items() if len(w) > 1} == {}, "an item went to two claimers"
    assert sorted(claimed) == items, "an item was lost"
    assert all(a["ok"] for a in acks) and len(acks) == len(items)
    assert queue.depth().total == 0


@pytest.mark.parametrize("ack_in_next_claim", [False, True], ids=["ack", "ack-in-next-claim"])
def test_stale_holders_are_refused_under_reclaim(ready_url: str, unique: str, tmp_path: Path,
                                                 ack_in_next_claim: bool) -> None:
    queue = onceonly.connect(ready_url).queue(unique)
    items = [f"job-{i:03d}" for i in range(40)]
    for item in items:
        queue.put(item)
    deadline = time.time() + 90
    history = run_workers(
        store_workers.work_with_stalls, WORKERS, tmp_path, ready_url, unique, 0.6, deadline, ack_in_next_claim,
        won=lambda e: e["event"] == "claim",
    )
    grants = defaultdict(list)
    for e in history:
        if e["event"] == "claim":
            grants[e["item"]].append(e["token"])
    successful_acks = defaultdict(list)
    for e in history:
        if e["event"] != "ack":
            continue
        newest = max(grants[e["item"]])
        if e["token"] < newest:
            assert not e["ok"], f"stale ack of {e['item']} (token {e['token']} < {newest}) was accepted"
        if e["ok"]:
            successful_acks[e["item"]].append(e["token"])
    for item, tokens in grants.items():
        assert len(tokens) == len(set(tokens)), f"{item}: token granted twice"
    assert sorted(successful_acks) == items, "an item was never acked (lost)"
    assert all(len(t) == 1 for t in successful_acks.values()), "an item was acked twice"
    refused = [e for e in history if e["event"] == "ack" and not e["ok"]]
    assert refused, "no stale ack happened: the test did not exercise reclaim"
    assert queue.depth().total == 0
