"""put_many: put for a batch, same semantics item by item, run on every backend."""

from __future__ import annotations

import time

import pytest

import onceonly


def test_put_many_schedules_every_item(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    now = time.time()
    written = q.put_many([("a", None, {"n": 1}), ("b", now - 5, [1, 2]), ("c", now + 3600, "later"),
                          ("d", None, None)])
    assert written == 4
    assert q.depth() == onceonly.QueueDepth(due=3, scheduled=1, in_flight=0)
    claims = q.claim(limit=10, lease=30)
    assert sorted((c.item_id, c.payload, c.attempt) for c in claims) == [
        ("a", {"n": 1}, 1), ("b", [1, 2], 1), ("d", None, 1)]
    assert q.ack_many(claims) == [True, True, True]


def test_put_many_takes_any_iterable(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    assert q.put_many((f"g{i}", None, i) for i in range(30)) == 30
    assert q.put_many([]) == 0
    assert q.put_many(iter(())) == 0
    assert sorted(c.payload for c in q.claim(limit=100, lease=30)) == list(range(30))


def test_put_many_reschedules_like_put_and_fences_the_holder(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    q.put("x", payload=1)
    (held,) = q.claim(limit=1, lease=30)
    assert q.put_many([("x", None, 2), ("y", None, 3)]) == 2
    assert q.ack(held) is False  # rescheduled under its holder
    assert q.retry(held, time.time()) is False
    again = {c.item_id: c for c in q.claim(limit=5, lease=30)}
    assert again["x"].payload == 2 and again["x"].token > held.token
    assert again["x"].attempt == held.attempt + 1  # attempts survive the reschedule
    assert again["y"].payload == 3


def test_an_id_listed_twice_ends_as_the_later_entry(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    assert q.put_many([("dup", time.time() + 3600, "first"), ("other", None, 0), ("dup", None, "second")]) == 3
    assert q.depth() == onceonly.QueueDepth(due=2, scheduled=0, in_flight=0)
    assert sorted((c.item_id, c.payload) for c in q.claim(limit=5, lease=30)) == [("dup", "second"), ("other", 0)]


@pytest.mark.parametrize(("items", "message"), [
    ([("ok", None, 1), ("ok2", None, 2), ("", None, 3)], r"items\[2\]: item_id"),
    ([("ok", None, 1), ("late", "tomorrow", 2)], r"items\[1\]: due_at"),
    ([("ok", None, 1), ("nan", None, float("nan"))], r"items\[1\]: payload"),
    ([("ok", None, 1), ("short", None)], r"items\[1\] must be an \(item_id, due_at, payload\) tuple"),
    ([["list", None, 1]], r"items\[0\] must be an \(item_id, due_at, payload\) tuple"),
    ("abc", "items must be an iterable"),
    ({"a": (None, 1)}, "items must be an iterable"),
    (42, "items must be an iterable"),
])
def test_bad_items_write_nothing(store: onceonly.Store, unique: str, items: object, message: str) -> None:
    q = store.queue(unique)
    with pytest.raises(onceonly.ConfigError, match=message):
        q.put_many(items)  # type: ignore[arg-type]
    assert q.depth().total == 0
