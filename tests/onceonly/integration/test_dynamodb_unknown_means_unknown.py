"""On DynamoDB, "unknown" (StoreUnavailableError) means only that an earlier
attempt of the write may have been applied: it got no answer, or a 5xx. A
throttled attempt was not applied, so when botocore's retry of it then finds
the condition failed, that is contention (None, a skipped tick), as if there
had been no throttle. Against dynalite, through a proxy that answers chosen
requests with DynamoDB's own errors."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

import onceonly
from tests.support.stores.dynamodb_answers import SERVER_ERROR, THROTTLED, DynamoDBAnswers

TICK_TIME = "2026-12-01T02:00:00Z"


@pytest.fixture
def answers(dynalite_endpoint: str) -> Iterator[DynamoDBAnswers]:
    with DynamoDBAnswers(dynalite_endpoint) as proxy:
        yield proxy


@pytest.fixture
def stores(dynamodb_url: str, answers: DynamoDBAnswers) -> Iterator[tuple[onceonly.Store, onceonly.Store]]:
    """(a store straight to dynalite, one through the proxy), on one table;
    ``timeout=10`` gives botocore a retry (two attempts)."""
    direct = onceonly.connect(f"{dynamodb_url}&timeout=10")
    direct.setup()
    table, _, _ = dynamodb_url.partition("?")
    proxied = onceonly.connect(f"{table}?region=us-east-1&endpoint_url={answers.endpoint}&timeout=10")
    yield direct, proxied
    proxied.close()
    direct.close()


def held_elsewhere(direct: onceonly.Store, name: str) -> onceonly.Lease:
    lease = direct.acquire(name, ttl=60)
    assert lease is not None
    return lease


def test_a_throttled_acquire_that_then_meets_a_holder_is_contention(
        stores: tuple[onceonly.Store, onceonly.Store], answers: DynamoDBAnswers, unique: str) -> None:
    direct, proxied = stores
    held_elsewhere(direct, unique)
    answers.refuse_next("UpdateItem", THROTTLED)
    assert proxied.acquire(unique, ttl=30) is None
    assert answers.refused == ["UpdateItem"] and answers.forwarded.count("UpdateItem") == 1  # it was retried


def test_a_write_whose_earlier_attempt_may_have_been_applied_stays_unknown(
        stores: tuple[onceonly.Store, onceonly.Store], answers: DynamoDBAnswers, unique: str) -> None:
    """A 500 may come after the write was applied: the failed condition on the
    retry may be this caller's own grant. Claim write: the same function."""
    direct, proxied = stores
    held_elsewhere(direct, unique)
    answers.refuse_next("UpdateItem", SERVER_ERROR)
    with pytest.raises(onceonly.StoreUnavailableError, match="earlier attempt may have been applied"):
        proxied.acquire(unique, ttl=30)
    assert answers.refused == ["UpdateItem"]


def test_a_duplicate_tick_delivery_that_is_throttled_is_skipped(
        stores: tuple[onceonly.Store, onceonly.Store], answers: DynamoDBAnswers, unique: str) -> None:
    direct, proxied = stores
    event = {"source": "aws.events", "detail-type": "Scheduled Event", "id": "a", "time": TICK_TIME, "detail": {}}
    ran: list[int] = []

    def body(event: Any, context: Any, tick: onceonly.Tick) -> None:
        ran.append(tick.token)

    assert onceonly.scheduled(direct, job=unique, ttl=30)(body)(event, None)["status"] == "ran"
    answers.refuse_next("UpdateItem", THROTTLED)
    again = onceonly.scheduled(proxied, job=unique, ttl=30)(body)({**event, "id": "b"}, None)
    assert again["status"] == "skipped" and ran == [1]
    assert answers.refused == ["UpdateItem"]


def test_a_permit_whose_reply_was_lost_is_unknown_and_frees_its_place_when_its_ttl_ends(
        stores: tuple[onceonly.Store, onceonly.Store], answers: DynamoDBAnswers, unique: str) -> None:
    """The add was applied, its reply lost, and botocore sent it again: the
    holder must not be counted twice (n would never come back down)."""
    direct, proxied = stores
    answers.apply_then_fail_next("UpdateItem")
    with pytest.raises(onceonly.StoreUnavailableError, match="earlier attempt may have been applied"):
        proxied.take_permit(unique, 2, ttl=0.5)
    assert answers.forwarded.count("UpdateItem") == 2  # applied, then sent again
    assert direct.take_permit(unique, 2, ttl=30) is not None  # the unanswered one holds the other place
    assert direct.take_permit(unique, 2, ttl=30) is None
    time.sleep(0.7)
    assert direct.take_permit(unique, 2, ttl=30) is not None  # its ttl ended: its place, and only it, is free
    assert direct.take_permit(unique, 2, ttl=30) is None
