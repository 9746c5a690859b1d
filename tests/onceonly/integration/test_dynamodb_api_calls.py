"""DynamoDB API calls per record, counted with botocore's before-call hook
(tests/support/stores/api_calls.py), for a worker loop (claim + ack_many) and for the
cron guard's tick. On dynalite, which has no transactions; the same loop on a
server with transactions is in tests/onceonly/unit/test_dynamodb_batches.py. The figures
are in docs/coordination.md ("API calls per record")."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest

import onceonly
from onceonly.dynamodb import DynamoDBStore
from tests.support.stores.api_calls import ApiCalls, drain

ITEMS = 100
BATCH = 25


@pytest.fixture
def client(dynamodb_url: str) -> Any:
    endpoint = parse_qs(urlsplit(dynamodb_url).query)["endpoint_url"][0]
    return boto3.client("dynamodb", region_name="us-east-1", endpoint_url=endpoint)


@pytest.fixture
def ddb_store(client: Any, dynamodb_url: str) -> Iterator[DynamoDBStore]:
    store = DynamoDBStore(client, urlsplit(dynamodb_url).netloc)
    store.setup()
    yield store
    store.close()


def test_worker_loop_calls_per_record(client: Any, ddb_store: DynamoDBStore, unique: str) -> None:
    q = ddb_store.queue(unique)
    with ApiCalls(client) as calls:
        q.put_many((f"i{i}", time.time() - 1, i) for i in range(ITEMS))
    # dynalite refuses the transaction once; the store then writes item by item.
    assert calls.counts == {"TransactWriteItems": 1, "UpdateItem": ITEMS}
    calls.reset()
    with calls:
        claim_calls = drain(q, BATCH)
    assert calls.counts["UpdateItem"] == ITEMS  # one conditional claim write per record
    assert calls.counts["DeleteItem"] == ITEMS  # no transactions: one conditional delete per record
    # Each claim queries the shards it walks: one when the first has enough,
    # all of them (8) when the queue runs dry.
    assert claim_calls <= calls.counts["Query"] <= claim_calls * ddb_store.shards
    assert set(calls.counts) == {"UpdateItem", "DeleteItem", "Query"}


def test_tick_guard_calls(client: Any, ddb_store: DynamoDBStore, unique: str) -> None:
    handler = onceonly.scheduled(ddb_store, job=unique)(lambda event, context, tick: "done")
    event = {"source": "aws.events", "detail-type": "Scheduled Event", "id": "e1",
             "time": "2026-11-30T10:00:00Z"}
    with ApiCalls(client) as calls:
        assert handler(event, None)["status"] == "ran"
    assert calls.counts == Counter({"UpdateItem": 2})  # acquire, complete
    calls.reset()
    with calls:
        assert handler({**event, "id": "e2"}, None)["status"] == "skipped"
    assert calls.counts == Counter({"UpdateItem": 1, "GetItem": 1})  # refused acquire, inspect for the reason


def test_permit_calls(client: Any, ddb_store: DynamoDBStore, unique: str) -> None:
    """On dynalite, which returns no item with a failed condition: take_permit
    with room, one conditional write; full, that write and a consistent read
    (looking for ended holders); full of ended holders, a third request, the
    eviction write. return_permit: one write."""
    with ApiCalls(client) as calls:
        held = ddb_store.take_permit(unique, 1, ttl=0.3)
        assert held is not None
    assert calls.counts == Counter({"UpdateItem": 1})
    calls.reset()
    with calls:
        assert ddb_store.take_permit(unique, 1, ttl=30) is None
    assert calls.counts == Counter({"UpdateItem": 1, "GetItem": 1})
    time.sleep(0.5)
    calls.reset()
    with calls:
        evicting = ddb_store.take_permit(unique, 1, ttl=30)
        assert evicting is not None
    assert calls.counts == Counter({"UpdateItem": 2, "GetItem": 1})
    calls.reset()
    with calls:
        assert ddb_store.return_permit(evicting) is True
    assert calls.counts == Counter({"UpdateItem": 1})
