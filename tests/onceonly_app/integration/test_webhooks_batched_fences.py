"""The batched statements of a dispatch or retry batch (deliveries.sql:
create_deliveries, stamp_fences, start_attempts, record_outcomes) fence each
row on its own, on the real PostgreSQL: in one statement, the rows whose
holder still owns the delivery go through and the others are refused, as
one statement per row did."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from onceonly_app.webhooks import deliveries as records
from onceonly_app.webhooks.deliveries import Outcome, delivery_id_for
from onceonly_app.webhooks.messages import DeliveryRequest
from tests.support.delivery.webhooks import TENANT, attempts, create_subscription, deliveries, new_id

MAX_ATTEMPTS = 5
FAILED = Outcome("failed", "retrying", 500, "HTTP 500", 4_000_000_000.0)


@pytest.fixture
def db(webhook_db: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(webhook_db, autocommit=True) as conn:  # each statement its own transaction
        yield conn


def _deliveries(db: psycopg.Connection, webhook_db: str, count: int) -> list[str]:
    webhook_id = create_subscription(webhook_db, "http://127.0.0.1:9/", "whsec_x")
    requests = [DeliveryRequest(webhook_id, new_id("evt"), "invoice.paid", {"n": n}, TENANT) for n in range(count)]
    unknown = DeliveryRequest(new_id("wh"), new_id("evt"), "invoice.paid", {}, TENANT)
    created = records.create_many(db, [*requests, requests[0], unknown])  # the first listed twice: created once
    ids = [delivery_id_for(r.webhook_id, r.event_id) for r in requests]
    assert (created.known_webhooks, created.delivery_ids) == ({webhook_id}, set(ids))  # nothing for unknown
    assert records.create_many(db, requests[:1]).delivery_ids == set()  # it exists: a duplicate
    return ids


def test_a_newer_holder_fences_its_row_off_and_leaves_the_others_alone(
    db: psycopg.Connection, webhook_db: str
) -> None:
    mine, taken = _deliveries(db, webhook_db, 2)
    # A retry worker (token 1) stamped `taken` before this dispatcher (token 0) started its attempts.
    assert records.stamp_fences(db, [(taken, 0, 1)]) == {taken: "pending"}
    begun = records.start_attempts(db, [(mine, 0, 0), (taken, 0, 0)], MAX_ATTEMPTS)
    assert set(begun) == {mine}  # no attempt, hence no request, for the fenced row
    rows = deliveries(webhook_db, [mine, taken])
    assert (rows[mine]["attempts"], rows[taken]["attempts"]) == (1, 0)

    assert records.start_attempts(db, [(taken, 0, 1)], MAX_ATTEMPTS).keys() == {taken}  # its holder starts
    recorded = records.record_many(db, [(mine, 0, 0, FAILED, 0.0), (taken, 0, 0, FAILED, 0.0)])
    assert {i: r.recorded for i, r in recorded.items()} == {mine: True, taken: False}
    rows = deliveries(webhook_db, [mine, taken])
    assert (rows[mine]["status"], rows[taken]["status"]) == ("retrying", "attempting")
    log = {(a["delivery_id"], a["fence_token"], a["recorded"]) for a in attempts(webhook_db, [mine, taken])}
    assert log == {(mine, 0, True), (taken, 0, False)}  # the refused outcome is logged too


def test_a_stale_stamp_is_refused_row_by_row(db: psycopg.Connection, webhook_db: str) -> None:
    first, second = _deliveries(db, webhook_db, 2)
    assert records.stamp_fences(db, [(first, 0, 5)]) == {first: "pending"}
    # A stale claim (token 3) and a fresh one (token 4) in one statement.
    assert records.stamp_fences(db, [(first, 0, 3), (second, 0, 4)]) == {second: "pending"}
    assert records.stamp_fences(db, [(second, 1, 9)]) == {}  # another generation: refused
    rows = deliveries(webhook_db, [first, second])
    assert (rows[first]["fence_token"], rows[second]["fence_token"]) == (5, 4)
