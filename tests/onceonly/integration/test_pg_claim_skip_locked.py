"""The PostgreSQL claim passes rows other sessions hold (SKIP LOCKED) instead
of waiting for them: a claimer never queues behind another claimer, a
crashed-and-hung holder's row, or an admin's open transaction. The ctid
re-checks would keep a claim exclusive without it, so only this test sees the
difference."""

from __future__ import annotations

import time

import psycopg
import pytest

import onceonly

TIMEOUT = 2.0  # the store's bound: a claim that waits for the lock fails after TIMEOUT/2


@pytest.mark.parametrize("store_url", ["postgres"], indirect=True)
def test_claim_takes_the_next_due_row_while_the_first_is_locked(store_url: str, store: onceonly.Store,
                                                                 unique: str) -> None:
    q = store.queue(unique)
    now = time.time()
    q.put("first", due_at=now - 20)
    q.put("second", due_at=now - 10)
    bounded = onceonly.connect(f"{store_url}?timeout={TIMEOUT:g}")
    try:
        with psycopg.connect(store_url) as holder:  # a transaction left open on the oldest due row
            holder.execute("SELECT 1 FROM onceonly_queue WHERE queue = %s AND item_id = 'first' FOR UPDATE",
                           (unique,))
            # A claim that waited for the lock would fail with StoreUnavailableError
            # at the bound, long before the holder lets go.
            claims = bounded.queue(unique).claim(limit=2, lease=60)
            assert [c.item_id for c in claims] == ["second"]
        (first,) = q.claim(limit=2, lease=60)  # the holder is gone: the row is claimable again
        assert first.item_id == "first"
    finally:
        bounded.close()
