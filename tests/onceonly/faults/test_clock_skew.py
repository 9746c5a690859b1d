"""Scenario 4: clock skew. The DynamoDB store is the only one on the caller's
clock (PostgreSQL and Redis use the server's), so a caller whose clock is off
by ``s`` seconds sees every lease end ``s`` seconds early (fast clock) or makes
grants that others see ending ``s`` seconds early (slow clock).

The margin (docs/reliability.md): a grant of ``lease`` seconds stays single
while every other caller's clock is less than ``lease - held`` seconds off,
``held`` being how long its holder has had it. Past that, two callers hold the
same item, and fencing still refuses the stale holder's writes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from onceonly.dynamodb import DynamoDBStore
from tests.onceonly.faults.harness import Plan, assert_sound, record, run
from tests.onceonly.faults.sizes import sizes

LEASE = 30.0


def _skewed(url: str, skew: float) -> DynamoDBStore:
    parts = urlsplit(url)
    return DynamoDBStore.from_url(parts.netloc, dict(parse_qsl(parts.query)), clock=lambda: time.time() + skew)


@pytest.fixture
def honest(dynamodb_url: str) -> Iterator[DynamoDBStore]:
    store = _skewed(dynamodb_url, 0.0)
    store.setup()
    yield store
    store.close()


@pytest.mark.parametrize("skew", [2.0, -2.0])
def test_a_skew_inside_the_margin_keeps_claims_single(honest: DynamoDBStore, dynamodb_url: str,
                                                      unique: str, skew: float) -> None:
    other = _skewed(dynamodb_url, skew)
    queue, their_queue = honest.queue(unique), other.queue(unique)
    queue.put("a")
    their_queue.put("b")
    mine = {c.item_id: c for c in queue.claim(limit=5, lease=LEASE)}
    theirs = {c.item_id: c for c in their_queue.claim(limit=5, lease=LEASE)}
    assert set(mine) | set(theirs) == {"a", "b"} and not set(mine) & set(theirs)
    # Neither side takes what the other holds, whichever clock granted it.
    assert their_queue.claim(limit=5, lease=LEASE) == [] and queue.claim(limit=5, lease=LEASE) == []
    lease = honest.acquire(unique, ttl=LEASE)
    assert lease is not None and other.acquire(unique, ttl=LEASE) is None
    assert all(queue.ack_many([*mine.values(), *theirs.values()]))
    other.close()


def test_a_fast_clock_past_the_margin_takes_held_items_and_fencing_refuses_the_first_holder(
        honest: DynamoDBStore, dynamodb_url: str, unique: str) -> None:
    fast = _skewed(dynamodb_url, LEASE)  # sees every lease granted now as ended
    queue = honest.queue(unique)
    queue.put("a")
    (first,) = queue.claim(limit=1, lease=LEASE)
    (second,) = fast.queue(unique).claim(limit=1, lease=LEASE)  # a double grant
    assert second.item_id == "a" and second.token > first.token
    assert not queue.ack(first), "the first holder's ack was accepted after the item was re-granted"
    assert fast.queue(unique).ack(second)
    lease = honest.acquire(unique, ttl=LEASE)
    assert lease is not None
    taken = fast.acquire(unique, ttl=LEASE)
    assert taken is not None and taken.token > lease.token
    assert not honest.release(lease) and not honest.complete(lease)
    fast.close()


def test_a_slow_clock_past_the_margin_makes_grants_others_take_at_once(
        honest: DynamoDBStore, dynamodb_url: str, unique: str) -> None:
    slow = _skewed(dynamodb_url, -LEASE)  # its grants end, by everyone else's clock, when made
    slow.queue(unique).put("a")  # due by its own clock (an item due "now" by the real one waits 30 s for it)
    (first,) = slow.queue(unique).claim(limit=1, lease=LEASE)
    (second,) = honest.queue(unique).claim(limit=1, lease=LEASE)
    assert second.item_id == "a" and second.token > first.token
    assert not slow.queue(unique).ack(first)
    assert honest.queue(unique).ack(second)
    slow.close()


def _plan(dynamodb_url: str, skew: float, size: dict[str, Any]) -> Plan:
    return Plan(scenario=f"clock skew ±{skew:g} s (lease 10 s)", store="dynamodb", url=dynamodb_url, lease=10.0,
                tick_ttl=10.0, post_latency=0.1, skews=[0.0, skew, -skew], **size)


QUICK = {"processes": 3, "items": 40, "ticks": 2, "faults": 0}
SOAK = {"processes": 6, "items": 600, "ticks": 12, "faults": 0, "deadline": 1400.0}


@pytest.mark.concurrency
@sizes(quick=QUICK, soak=SOAK)
def test_workers_two_seconds_apart_stay_exactly_once(dynamodb_url: str, size: dict[str, Any],
                                                     tmp_path: Path) -> None:
    result = run(_plan(dynamodb_url, 2.0, size), tmp_path, None)
    record(result)
    assert_sound(result, faults_expected=False)


@pytest.mark.concurrency
@sizes(quick=QUICK, soak=SOAK)
def test_workers_thirty_seconds_apart_double_grant_but_no_stale_write_lands(
        dynamodb_url: str, size: dict[str, Any], tmp_path: Path) -> None:
    result = run(_plan(dynamodb_url, 30.0, size), tmp_path, None)
    record(result)
    assert result["stale_accepted"] == 0, result["violations"]
    assert result["lost"] == 0, result["lost_keys"]
    kinds = {v.split()[0] for v in result["violations"]}
    assert kinds <= {"overlap", "duplicate_token"}, result["violations"]
