"""DynamoDB's take_permit when the semaphore looks full: it reads the item and
evicts the holders whose ttl ended in a second conditional write. Changes made
between that read and that write (by a caller with a larger limit, or by
another evictor) must not let it add a holder past its own limit. The other
caller's write is made at that exact point, from the read's reply, on dynalite."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import onceonly
from onceonly.dynamodb import DynamoDBStore


@pytest.fixture
def ddb(dynamodb_url: str) -> Iterator[DynamoDBStore]:
    store = onceonly.connect(dynamodb_url)
    assert isinstance(store, DynamoDBStore)
    store.setup()
    yield store
    store.close()


def after_the_read(store: DynamoDBStore, meanwhile: Callable[[], Any]) -> None:
    """Run ``meanwhile`` once, right after take_permit's read of the item."""
    table = store._table
    call = table.call

    def call_then_meanwhile(deadline: Any, operation: str, **kwargs: Any) -> Any:
        response = call(deadline, operation, **kwargs)
        if operation == "get_item":
            table.call = call  # type: ignore[method-assign]
            meanwhile()
        return response

    table.call = call_then_meanwhile  # type: ignore[method-assign]


def test_a_holder_added_after_the_read_under_a_larger_limit_is_counted(ddb: DynamoDBStore, dynamodb_url: str,
                                                                         unique: str) -> None:
    assert ddb.take_permit(unique, 2, ttl=0.3) is not None  # ends soon: evicted by the next take
    live = ddb.take_permit(unique, 2, ttl=30)
    assert live is not None
    time.sleep(0.5)
    other = onceonly.connect(dynamodb_url)
    added: list[onceonly.Permit | None] = []
    after_the_read(ddb, lambda: added.append(other.take_permit(unique, 10, ttl=30)))
    # Holders when the eviction is written: the ended one, `live`, the one just added. Live: 2 = the limit.
    assert ddb.take_permit(unique, 2, ttl=30) is None
    assert added and added[0] is not None
    other.close()
    assert ddb.return_permit(live) and ddb.return_permit(added[0])
    assert ddb.take_permit(unique, 1, ttl=30) is not None  # the ended one was dropped: nothing else holds


def test_an_eviction_raced_by_another_evictor_adds_one_holder_each(ddb: DynamoDBStore, dynamodb_url: str,
                                                                    unique: str) -> None:
    for _ in range(2):
        assert ddb.take_permit(unique, 2, ttl=0.3) is not None
    time.sleep(0.5)
    other = onceonly.connect(dynamodb_url)
    raced: list[onceonly.Permit | None] = []
    after_the_read(ddb, lambda: raced.append(other.take_permit(unique, 2, ttl=30)))
    mine = ddb.take_permit(unique, 2, ttl=30)  # its eviction fails (the other evicted first); it tries once more
    other.close()
    assert raced and raced[0] is not None and mine is not None
    assert ddb.take_permit(unique, 2, ttl=30) is None
