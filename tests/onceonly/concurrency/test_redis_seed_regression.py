"""The seed's regression: the field code popped its Redis retry queue with
ZRANGEBYSCORE and then ZREM in a second round trip, so two workers could both
read an item before either removed it, and both ran it.

Both tests race real OS processes against the real Redis: each process opens
its own connection after start and pings through it, all are released by one
barrier, and each writes what it got to its own append-only history file. The
checks read the files afterwards; nothing is counted in shared memory, and
every round must have at least two workers that got items.

1. The old field code must show the duplicate (else this harness could not
   catch one, and test 2 would prove nothing).
2. RedisQueue.claim, raced the same way, must hand out every item exactly once.
"""

from __future__ import annotations

import secrets
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import redis

from onceonly.redis import RedisStore
from tests.support.races.race import BARRIER_TIMEOUT, PING, History, run_workers

pytestmark = [pytest.mark.concurrency, pytest.mark.processes]

WORKERS = 8
ITEMS = 400
BATCH = 10
SEED_MAX_ROUNDS = 10  # the race shows in the first round or two here; 10 bounds a bad day
CLAIM_ROUNDS = 3
# Far longer than any round can take, so no lease runs out mid-test: a second
# claim of an item can then only be a double grant, never a legitimate reclaim.
CLAIM_LEASE = 600.0


# -- checks ---------------------------------------------------------------------
def _items_got_by_several_workers(events: list[dict[str, Any]]) -> dict[str, set[int]]:
    workers_by_item: dict[str, set[int]] = defaultdict(set)
    for event in events:
        workers_by_item[event["item"]].add(event["worker"])
    return {item: workers for item, workers in workers_by_item.items() if len(workers) > 1}


def _item_ids(prefix: str) -> list[str]:
    return [f"{prefix}-{n:03d}" for n in range(ITEMS)]


# -- workers (module level, so that spawned processes can import them) -------------
def _field_code_worker(worker_no: int, barrier: Any, history_path: Path, redis_url: str, key: str) -> None:
    """The old field code: read a batch, then remove it in a second round trip."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    client.ping()  # connected before the race starts
    history = History(history_path)
    barrier.wait(BARRIER_TIMEOUT)
    while ids := client.zrangebyscore(key, "-inf", time.time(), start=0, num=BATCH):
        client.zrem(key, *ids)  # the result was ignored, as the field code did
        for item in ids:
            history.write(worker=worker_no, item=item)
    client.close()
    history.close()


def _claim_worker(
    worker_no: int, barrier: Any, history_path: Path, redis_url: str, queue_name: str
) -> None:
    """Claim batches until nothing is due, acking each batch, so that every ack
    path races: worker_no % 3 == 0 acks with ack_many, 1 one by one, 2 in its
    next claim (``acks=``)."""
    store = RedisStore.from_url(redis_url)
    store.inspect(PING)  # connected before the race starts
    queue = store.queue(queue_name)
    history = History(history_path)
    barrier.wait(BARRIER_TIMEOUT)
    pending: list[Any] = []  # claims to ack in the next claim (worker_no % 3 == 2)
    while True:
        claims = queue.claim(limit=BATCH, lease=CLAIM_LEASE, acks=pending)
        for c, ok in zip(pending, claims.acked, strict=True):
            history.write(event="ack", worker=worker_no, item=c.item_id, ok=ok)
        for c in claims:
            history.write(event="claim", worker=worker_no, item=c.item_id, token=c.token, attempt=c.attempt)
        if not claims:
            break
        if worker_no % 3 == 2:
            pending = claims
            continue
        acked = queue.ack_many(claims) if worker_no % 3 == 0 else [queue.ack(c) for c in claims]
        for c, ok in zip(claims, acked, strict=True):
            history.write(event="ack", worker=worker_no, item=c.item_id, ok=ok)
    store.close()
    history.close()


# -- tests ---------------------------------------------------------------------------
@pytest.fixture
def client(redis_server_url: str) -> Any:
    c = redis.Redis.from_url(redis_server_url)
    yield c
    c.close()


def test_field_code_hands_one_item_to_two_workers(redis_server_url: str, client: Any, tmp_path: Path) -> None:
    for round_no in range(SEED_MAX_ROUNDS):
        key = f"onceonly-test:seed-retry:{secrets.token_hex(6)}"
        items = _item_ids("job")
        past = time.time() - 60
        client.zadd(key, {item: past + n / 1000 for n, item in enumerate(items)})
        try:
            events = run_workers(_field_code_worker, WORKERS, tmp_path / f"round-{round_no}", redis_server_url, key,
                                 won=lambda got: True)
        finally:
            client.delete(key)
        assert {e["item"] for e in events} == set(items)  # the bug duplicates; it does not lose
        if _items_got_by_several_workers(events):
            return
    pytest.fail(f"the field code's ZRANGEBYSCORE+ZREM race never showed in {SEED_MAX_ROUNDS} rounds "
                f"of {WORKERS} workers: this harness cannot catch a double claim")


def test_queue_claim_hands_each_item_to_exactly_one_worker(
    redis_url: str, client: Any, tmp_path: Path
) -> None:
    for round_no in range(CLAIM_ROUNDS):
        queue_name = f"seed-regression-{secrets.token_hex(6)}"
        store = RedisStore.from_url(redis_url)
        queue = store.queue(queue_name)
        items = _item_ids("job")
        for item in items:
            queue.put(item, payload={"item": item})
        try:
            events = run_workers(_claim_worker, WORKERS, tmp_path / f"round-{round_no}", redis_url, queue_name,
                                 won=lambda e: e["event"] == "claim")
            assert queue.depth().total == 0
        finally:
            client.delete(*queue._keys)
        claims = [e for e in events if e["event"] == "claim"]
        acks = [e for e in events if e["event"] == "ack"]
        assert _items_got_by_several_workers(claims) == {}
        assert len(claims) == len({c["item"] for c in claims}), "an item was claimed twice"
        assert {c["item"] for c in claims} == set(items), "an item was lost"
        assert {c["attempt"] for c in claims} == {1}
        assert len(acks) == len(claims) and all(a["ok"] for a in acks)
