"""The due-queue contract, written once, run on every backend."""

from __future__ import annotations

import dataclasses
import time

import pytest

import onceonly


def test_put_claim_ack(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    q.put("a", payload={"n": 1})
    claims = q.claim(limit=10, lease=30)
    assert [(c.item_id, c.payload, c.attempt) for c in claims] == [("a", {"n": 1}, 1)]
    claim = claims[0]
    assert claim.token >= 1 and claim.lease_expires_at > time.time() + 20
    assert q.claim(limit=10, lease=30) == []  # in flight: not claimable again
    assert q.depth() == onceonly.QueueDepth(due=0, scheduled=0, in_flight=1)
    assert q.ack(claim) is True
    assert q.ack(claim) is False
    assert q.depth().total == 0


def test_future_items_wait_for_their_time(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    # "later" is due well after the first claim even on a loaded machine.
    later = time.time() + 3
    q.put("later", due_at=later)
    q.put("far", due_at=time.time() + 3600)
    q.put("now")
    assert q.depth() == onceonly.QueueDepth(due=1, scheduled=2, in_flight=0)
    assert [c.item_id for c in q.claim(limit=10, lease=30)] == ["now"]
    time.sleep(max(0.0, later - time.time()) + 0.3)
    assert [c.item_id for c in q.claim(limit=10, lease=30)] == ["later"]


def test_claim_respects_limit_and_due_order(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    now = time.time()
    for i in range(5):
        q.put(f"i{i}", due_at=now - 10 + i)
    first = q.claim(limit=3, lease=30)
    assert len(first) == 3
    rest = q.claim(limit=10, lease=30)
    assert sorted(c.item_id for c in first + rest) == [f"i{i}" for i in range(5)]
    assert q.claim(limit=10, lease=30) == []


def test_expired_claim_is_reclaimed_with_next_attempt(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    q.put("job", payload="p")
    (stale,) = q.claim(limit=1, lease=0.3)
    time.sleep(0.6)
    assert q.depth() == onceonly.QueueDepth(due=1, scheduled=0, in_flight=0)  # a lease that ran out is due
    (fresh,) = q.claim(limit=1, lease=30)
    assert fresh.item_id == "job" and fresh.payload == "p"
    assert fresh.token > stale.token
    assert fresh.attempt == stale.attempt + 1
    # the stale holder is fenced off; the fresh one is not
    assert q.ack(stale) is False
    assert q.retry(stale, time.time()) is False
    assert q.ack(fresh) is True


def test_retry_reschedules_and_keeps_attempts(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    q.put("r", payload=[1, 2])
    (c1,) = q.claim(limit=1, lease=30)
    # Far enough ahead that the checks below finish before it (DynamoDB's depth
    # is 16 queries; a loaded machine took more than 0.4 s), then wait for it.
    due = time.time() + 2
    assert q.retry(c1, due) is True
    assert q.retry(c1, time.time()) is False  # no longer held after the retry
    assert q.depth() == onceonly.QueueDepth(due=0, scheduled=1, in_flight=0)
    assert q.claim(limit=1, lease=30) == []
    time.sleep(max(0.0, due - time.time()) + 0.2)
    (c2,) = q.claim(limit=1, lease=30)
    assert (c2.item_id, c2.payload, c2.attempt) == ("r", [1, 2], 2)
    assert c2.token > c1.token


def test_ack_many_in_order_with_lost_ones(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    for i in range(4):
        q.put(f"m{i}")
    claims = sorted(q.claim(limit=10, lease=30), key=lambda c: c.item_id)
    assert len(claims) == 4
    assert q.ack(claims[1]) is True  # already acked: lost for ack_many
    assert q.ack_many(claims) == [True, False, True, True]
    assert q.ack_many([]) == []
    q.put("dup")
    (dup,) = q.claim(limit=1, lease=30)
    assert q.ack_many([dup, dup]) == [True, False]  # listed twice, acked once
    q.put("re")
    (stale,) = q.claim(limit=1, lease=0.3)
    time.sleep(0.6)
    (fresh,) = q.claim(limit=1, lease=30)
    assert q.ack_many([stale, fresh]) == [False, True]
    assert q.depth().total == 0


def test_cancel(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    q.put("c", due_at=time.time() + 60)
    assert q.cancel("c") is True
    assert q.cancel("c") is False
    assert q.depth().total == 0


def test_cancel_many_removes_each_item_whatever_its_state(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    q.put_many([("waiting", time.time() + 60, None), ("due", None, None), ("claimed", None, None)])
    claims = {c.item_id: c for c in q.claim(limit=3, lease=30)}
    assert set(claims) == {"due", "claimed"}
    q.put("due", payload=1)  # due again, no longer claimed
    assert q.cancel_many(["waiting", "absent", "due", "claimed", "due"]) == [True, False, True, True, False]
    assert q.depth().total == 0
    assert q.ack(claims["claimed"]) is False  # its holder's ack is refused: the item is gone
    assert q.cancel_many([]) == []


def test_put_reschedules_existing_item_and_fences_holder(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    q.put("x", payload=1)
    (held,) = q.claim(limit=1, lease=30)
    q.put("x", payload=2)  # reschedule for now, taking it from the holder
    assert q.ack(held) is False
    (again,) = q.claim(limit=1, lease=30)
    assert again.payload == 2 and again.token > held.token


def test_queues_are_separate(store: onceonly.Store, unique: str) -> None:
    store.queue(unique + "-a").put("same")
    store.queue(unique + "-b").put("same")
    assert len(store.queue(unique + "-a").claim(limit=5, lease=30)) == 1
    assert len(store.queue(unique + "-b").claim(limit=5, lease=30)) == 1


def test_empty_queue_claims_nothing(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    assert q.claim(limit=25, lease=30) == []
    assert q.depth() == onceonly.QueueDepth(0, 0, 0)


@pytest.mark.parametrize(("limit", "lease"), [(0, 30), (-1, 30), (1.5, 30), (5, 0), (5, -2)])
def test_bad_claim_arguments(store: onceonly.Store, unique: str, limit: object, lease: object) -> None:
    with pytest.raises(onceonly.ConfigError):
        store.queue(unique).claim(limit=limit, lease=lease)  # type: ignore[arg-type]


def test_bad_put_arguments(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    with pytest.raises(onceonly.ConfigError, match="item_id"):
        q.put("")
    with pytest.raises(onceonly.ConfigError, match="due_at"):
        q.put("a", due_at="tomorrow")  # type: ignore[arg-type]
    with pytest.raises(onceonly.ConfigError, match="JSON"):
        q.put("a", payload=object())
    assert q.depth().total == 0


def test_claim_with_acks_acks_the_previous_batch_then_claims(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    for i in range(3):
        q.put(f"w{i}", payload=i)
    first = q.claim(limit=1, lease=30)
    assert len(first) == 1 and first.acked == []
    second = q.claim(limit=5, lease=30, acks=first)
    assert second.acked == [True]
    assert sorted((c.item_id, c.payload, c.attempt) for c in [*first, *second]) == [
        ("w0", 0, 1), ("w1", 1, 1), ("w2", 2, 1)]
    assert q.depth() == onceonly.QueueDepth(due=0, scheduled=0, in_flight=2)
    # the same results as ack_many: already acked, listed twice, then nothing left
    last = q.claim(limit=5, lease=30, acks=[first[0], *second, second[0]])
    assert last == [] and last.acked == [False, True, True, False]
    assert q.depth().total == 0


def test_claim_with_acks_refuses_a_stale_claim(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    q.put("job", payload="p")
    (stale,) = q.claim(limit=1, lease=0.3)
    time.sleep(0.6)
    (fresh,) = q.claim(limit=1, lease=30)  # its lease ran out: re-granted
    refused = q.claim(limit=1, lease=30, acks=[stale])
    assert refused.acked == [False] and refused == []  # token-checked; the fresh holder keeps it
    assert q.claim(limit=1, lease=30, acks=[fresh]).acked == [True]
    assert q.depth().total == 0


@pytest.mark.parametrize("bad", [{"limit": 0}, {"lease": -1}, {"acks": "w"}, {"acks": [object()]}])
def test_claim_with_bad_arguments_acks_nothing(store: onceonly.Store, unique: str, bad: dict[str, object]) -> None:
    q = store.queue(unique)
    q.put("w")
    held = q.claim(limit=1, lease=30)
    with pytest.raises(onceonly.ConfigError):
        q.claim(**{"limit": 1, "lease": 30, "acks": held, **bad})  # type: ignore[arg-type]
    assert q.ack_many(held) == [True]  # still held: checked before the acks ran


def test_ack_and_retry_check_the_token_as_well_as_the_owner(store: onceonly.Store, unique: str) -> None:
    """Owners are random per grant, so only a claim altered by hand can carry the
    holder's owner with another token: it is refused all the same."""
    q = store.queue(unique)
    q.put("t")
    (held,) = q.claim(limit=1, lease=30)
    for token in (held.token - 1, held.token + 1):
        forged = dataclasses.replace(held, token=token)
        assert q.ack(forged) is False
        assert q.retry(forged, time.time()) is False
        assert q.claim(limit=1, lease=30, acks=[forged]).acked == [False]
    assert q.ack(held) is True
