"""A large put_many on a healthy store finishes, however small the store's
``timeout``: on DynamoDB each batch of up to 100 writes gets a deadline of its
own. With one deadline for the whole call, 4,000 items at ``timeout=3`` failed
on every attempt, and calling again never wrote the tail (1,630 of 4,000)."""

from __future__ import annotations

import time

import psycopg
import pytest

import onceonly
from onceonly_app.webhooks import subscriptions
from onceonly_app.webhooks.signing import new_secret
from tests.support.delivery.webhooks import TENANT, create_subscription

ITEMS = 4000
TIMEOUT = 3.0  # the 4,000 writes take several times that on dynalite (about 1,000/s here, unloaded)


@pytest.mark.parametrize("store_url", ["dynamodb", "redis", "postgres"], indirect=True)
def test_four_thousand_items_at_a_three_second_timeout(store_url: str, unique: str) -> None:
    roomy = onceonly.connect(store_url)
    roomy.setup()
    tight = onceonly.connect(f"{store_url}{'&' if '?' in store_url else '?'}timeout={TIMEOUT:g}")
    try:
        queue = tight.queue(unique)
        started = time.monotonic()
        assert queue.put_many((f"item-{i:05d}", None, {"i": i}) for i in range(ITEMS)) == ITEMS
        took = time.monotonic() - started
        due = roomy.queue(unique).depth().due
        deadline = time.monotonic() + 10  # the GSI is eventually consistent
        while due < ITEMS and time.monotonic() < deadline:
            time.sleep(0.1)
            due = roomy.queue(unique).depth().due
        assert due == ITEMS  # distinct ids, in a queue of this test's own: every item is there
        print(f"{store_url.split(':')[0]}: {ITEMS} puts in {took:.1f} s at timeout={TIMEOUT:g}")
    finally:
        tight.close()
        roomy.close()


@pytest.mark.parametrize("store_url", ["dynamodb"], indirect=True)
def test_enabling_a_subscription_with_four_thousand_held_deliveries_queues_them_all(
        store_url: str, webhook_db: str, unique: str) -> None:
    """subscriptions.enable() releases every held delivery in one put_many: it
    finishes on a store whose timeout is far shorter than the whole put."""
    webhook_id = create_subscription(webhook_db, "http://127.0.0.1:9/never-called", new_secret(), enabled=False)
    with psycopg.connect(webhook_db, autocommit=True) as conn:
        conn.execute("INSERT INTO webhook_deliveries (id, webhook_id, tenant_id, event_id, event_type, payload,"
                     " status, occurred_at, event_sequence)"
                     " SELECT %s || n, %s, %s, 'evt-' || n, 'invoice.paid', '{}', 'held', now(), n"
                     " FROM generate_series(1, %s) AS n", (f"msg-{unique}-", webhook_id, TENANT, ITEMS))
        tight = onceonly.connect(f"{store_url}&timeout={TIMEOUT:g}")
        roomy = onceonly.connect(store_url)
        try:
            tight.setup()
            released = subscriptions.enable(conn, tight.queue(unique), webhook_id)
            assert len(released.released) == ITEMS
            deadline = time.monotonic() + 10  # the GSI is eventually consistent
            while roomy.queue(unique).depth().total < ITEMS and time.monotonic() < deadline:
                time.sleep(0.1)
            assert roomy.queue(unique).depth().total == ITEMS
        finally:
            tight.close()
            roomy.close()
