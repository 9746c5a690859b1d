"""put_if_absent: put only what the queue does not hold, in any state; an item
a worker holds is never taken from it. Run on every backend."""

from __future__ import annotations

import time

import pytest

import onceonly


def test_puts_only_absent_items_and_says_which(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    q.put("there", time.time() + 3600, "old")
    assert q.put_if_absent([("new", None, 1), ("there", None, "new"), ("new", None, 2), ("late", None, 3)]) == [
        True, False, False, True]
    assert q.depth() == onceonly.QueueDepth(due=2, scheduled=1, in_flight=0)  # "there" still waits, unchanged
    assert sorted((c.item_id, c.payload) for c in q.claim(limit=5, lease=30)) == [("late", 3), ("new", 1)]
    assert q.put_if_absent([]) == []


def test_a_claimed_item_stays_its_holders(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    q.put("x", payload=1)
    (held,) = q.claim(limit=1, lease=30)
    assert q.put_if_absent([("x", None, 2)]) == [False]
    assert q.claim(limit=5, lease=30) == []  # not handed to a second worker
    assert q.retry(held, time.time()) is True  # the holder still holds it
    (again,) = q.claim(limit=1, lease=30)
    assert again.payload == 1 and again.token > held.token
    assert q.ack(again) is True
    assert q.put_if_absent([("x", None, 3)]) == [True]  # gone once acked: put again
    (third,) = q.claim(limit=1, lease=30)
    assert third.payload == 3


def test_bad_items_are_refused_before_anything_is_written(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    with pytest.raises(onceonly.ConfigError, match=r"items\[1\]: item_id"):
        q.put_if_absent([("ok", None, 1), ("", None, 2)])
    assert q.depth().total == 0
