"""DynamoDB batches on a server with transactions (moto; dynalite has none, so
the contract suite covers the item-by-item path): ack_many and put_many are one
TransactWriteItems per 100 writes, with every ack's condition kept. moto is not
atomic (two racing conditional writes can both succeed): these are sequential
checks of the API calls and of
the conditions, not of races."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

import onceonly
from onceonly.dynamodb import DynamoDBQueue, DynamoDBStore
from tests.support.stores.api_calls import ApiCalls, drain


@pytest.fixture
def client() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("dynamodb", region_name="us-east-1")


@pytest.fixture
def queue(client: Any) -> Iterator[DynamoDBQueue]:
    # moto runs in this process and is slow on a loaded machine: the call
    # deadline (tests/onceonly/integration/test_dynamodb_call_deadline.py) is not what
    # these tests check.
    store = DynamoDBStore(client, "onceonly-batches", shards=1, timeout=120)
    store.setup()
    yield store.queue("q")
    store.close()


def _claims(q: DynamoDBQueue, count: int) -> list[onceonly.Claim]:
    q.put_many((f"i{i:03}", time.time() - 1, i) for i in range(count))
    claims = q.claim(limit=count, lease=60)
    assert len(claims) == count
    return claims


def test_an_ack_batch_is_one_transaction(client: Any, queue: DynamoDBQueue) -> None:
    claims = _claims(queue, 25)
    with ApiCalls(client) as calls:
        assert queue.ack_many(claims) == [True] * 25
    assert calls.counts == {"TransactWriteItems": 1}
    assert queue.depth().total == 0


def test_a_stale_claim_in_the_batch_is_refused_and_the_rest_acked(client: Any, queue: DynamoDBQueue) -> None:
    claims = _claims(queue, 5)
    stale = dataclasses.replace(claims[2], owner="someone-else")  # as after a reclaim
    with ApiCalls(client) as calls:
        assert queue.ack_many([*claims[:2], stale, *claims[3:]]) == [True, True, False, True, True]
    # Cancelled (all or nothing), then sent again without the refused delete.
    assert calls.counts == {"TransactWriteItems": 2}
    assert queue.depth() == onceonly.QueueDepth(due=0, scheduled=0, in_flight=1)
    assert queue.ack(claims[2]) is True


def test_a_stale_and_a_fresh_claim_of_one_item(client: Any, queue: DynamoDBQueue) -> None:
    (fresh,) = _claims(queue, 1)
    stale = dataclasses.replace(fresh, token=fresh.token - 1)
    # A transaction takes an item once: the second write goes on its own.
    assert queue.ack_many([stale, fresh, fresh]) == [False, True, False]
    assert queue.depth().total == 0


def test_batches_over_a_hundred_writes(client: Any, queue: DynamoDBQueue) -> None:
    with ApiCalls(client) as calls:
        assert queue.put_many((f"i{i:03}", time.time() - 1, i) for i in range(150)) == 150
    assert calls.counts == {"TransactWriteItems": 2}
    claims = queue.claim(limit=150, lease=60)
    assert sorted(c.payload for c in claims) == list(range(150))
    calls.reset()
    with calls:
        assert queue.ack_many(claims) == [True] * 150
    assert calls.counts == {"TransactWriteItems": 2}


def test_put_many_keeps_token_and_attempts_like_put(client: Any, queue: DynamoDBQueue) -> None:
    (held,) = _claims(queue, 1)
    queue.put_many([(held.item_id, None, "again")])
    assert queue.ack(held) is False
    (again,) = queue.claim(limit=1, lease=60)
    assert (again.payload, again.token, again.attempt) == ("again", held.token + 1, held.attempt + 1)


def test_worker_loop_calls_per_record(client: Any, queue: DynamoDBQueue) -> None:
    queue.put_many((f"i{i:03}", time.time() - 1, i) for i in range(100))
    with ApiCalls(client) as calls:
        assert drain(queue, 25) == 5
    # Per record: one conditional claim write, 1/25 of a query (one shard
    # here) and 1/25 of a transaction: 1.08 calls, plus the final empty query.
    assert calls.counts == {"Query": 5, "UpdateItem": 100, "TransactWriteItems": 4}


def test_large_payloads_split_the_transactions_under_4_mb(client: Any, queue: DynamoDBQueue) -> None:
    big = "x" * 200_000  # 30 of them: 6 MB, over the 4 MB a transaction takes
    with ApiCalls(client) as calls:
        assert queue.put_many((f"big{i}", None, big) for i in range(30)) == 30
    assert calls.counts == {"TransactWriteItems": 3}  # 14 + 14 + 2, under 3 MB each
    assert sorted(len(c.payload) for c in queue.claim(limit=30, lease=60)) == [200_000] * 30
