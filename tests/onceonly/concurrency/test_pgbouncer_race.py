"""The PostgreSQL store through a real transaction-mode PgBouncer (default
settings) under a 12-process race: the shape that, with startup options
ignored and prepared statements on, failed with ``prepared statement "_pg3_0"
already exists`` and left 122 of 1,500 items unacked. Every worker
is connected before the barrier; the histories are checked afterwards."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

import onceonly
from tests.onceonly.concurrency import store_workers
from tests.support.races.race import run_workers

pytestmark = [pytest.mark.concurrency, pytest.mark.processes]
WORKERS = 12
ITEMS = 1500
BATCH = 10  # small batches: many statements per worker, each a chance to hit another's server connection


def test_twelve_claimers_through_pgbouncer_take_every_item_once(
        postgres_pgbouncer_url: str, unique: str, tmp_path: Path) -> None:
    store = onceonly.connect(postgres_pgbouncer_url)
    store.setup()
    queue = store.queue(unique)
    items = [f"item-{i:04d}" for i in range(ITEMS)]
    queue.put_many((item, None, {"i": item}) for item in items)
    # run_workers fails on any worker's crash, e.g. a "_pg3_0 already exists"
    history = run_workers(store_workers.drain_queue, WORKERS, tmp_path, postgres_pgbouncer_url, unique, BATCH,
                          won=lambda e: e["event"] == "claim", timeout=240)
    claimed = defaultdict(list)
    for event in history:
        if event["event"] == "claim":
            claimed[event["item"]].append(event["worker"])
    assert {i: w for i, w in claimed.items() if len(w) > 1} == {}, "an item went to two claimers"
    assert sorted(claimed) == items, "an item was lost"
    acks = [e for e in history if e["event"] == "ack"]
    assert len(acks) == ITEMS and all(a["ok"] for a in acks), "an ack was refused"
    assert queue.depth().total == 0
    store.close()
