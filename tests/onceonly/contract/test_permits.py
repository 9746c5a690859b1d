"""The counting semaphore's contract (take_permit / return_permit), written
once, run on every store: at most ``limit`` permits held at once, a permit
whose ttl ended frees its place by itself, a stale or repeated return frees
nothing else, and a limit changed between calls applies to the next take."""

from __future__ import annotations

import time

import pytest

import onceonly
from onceonly.stores._common import MAX_PERMIT_LIMIT


def take(store: onceonly.Store, name: str, limit: int, ttl: float = 30) -> onceonly.Permit:
    permit = store.take_permit(name, limit, ttl=ttl)
    assert permit is not None, f"no permit of {name!r} under limit {limit}"
    return permit


def test_the_cap_is_held(store: onceonly.Store, unique: str) -> None:
    permits = [take(store, unique, 3) for _ in range(3)]
    assert store.take_permit(unique, 3, ttl=30) is None
    assert len({p.holder for p in permits}) == 3
    assert all(p.name == unique and p.expires_at > time.time() + 20 for p in permits)


def test_a_return_frees_one_place(store: onceonly.Store, unique: str) -> None:
    first, _ = take(store, unique, 2), take(store, unique, 2)
    assert store.take_permit(unique, 2, ttl=30) is None
    assert store.return_permit(first) is True
    take(store, unique, 2)
    assert store.take_permit(unique, 2, ttl=30) is None


def test_an_expired_permit_frees_its_place(store: onceonly.Store, unique: str) -> None:
    take(store, unique, 1, ttl=0.3)  # a holder that crashed: it never returns
    assert store.take_permit(unique, 1, ttl=30) is None
    time.sleep(0.6)
    take(store, unique, 1)
    assert store.take_permit(unique, 1, ttl=30) is None


def test_many_ended_holders_free_their_places_for_the_next_take(store: onceonly.Store, unique: str) -> None:
    # More than one eviction write's worth on DynamoDB (expressions.MAX_EVICT), under a limit lowered to 1.
    # The ttl outlasts 120 takes on a loaded machine (dynalite: about 10 ms each).
    for _ in range(120):
        take(store, unique, 120, ttl=3.0)
    assert store.take_permit(unique, 120, ttl=30) is None
    time.sleep(3.2)
    take(store, unique, 1)
    assert store.take_permit(unique, 1, ttl=30) is None
    assert store.take_permit(unique, 2, ttl=30) is not None  # the ended ones hold nothing


def test_a_stale_return_is_false_and_frees_nothing_else(store: onceonly.Store, unique: str) -> None:
    stale = take(store, unique, 1, ttl=0.3)
    time.sleep(0.6)
    current = take(store, unique, 1)
    assert store.return_permit(stale) is False
    assert store.take_permit(unique, 1, ttl=30) is None  # the current holder still holds its place
    assert store.return_permit(current) is True


def test_an_expired_permit_not_yet_dropped_returns_false(store: onceonly.Store, unique: str) -> None:
    expired = take(store, unique, 2, ttl=0.3)
    time.sleep(0.6)
    assert store.return_permit(expired) is False  # it had ended, though nobody took its place
    take(store, unique, 2)
    take(store, unique, 2)
    assert store.take_permit(unique, 2, ttl=30) is None


def test_a_repeated_return_is_refused_and_frees_no_second_place(store: onceonly.Store, unique: str) -> None:
    first, _ = take(store, unique, 2), take(store, unique, 2)
    assert store.return_permit(first) is True
    assert store.return_permit(first) is False
    take(store, unique, 2)  # the one place the first return freed
    assert store.take_permit(unique, 2, ttl=30) is None
    assert store.return_permit(first) is False


def test_a_permit_never_taken_returns_false(store: onceonly.Store, unique: str) -> None:
    assert store.return_permit(onceonly.Permit(unique, "0123456789abcdef", time.time() + 30)) is False
    held = take(store, unique, 1)
    assert store.return_permit(onceonly.Permit(unique, "0123456789abcdef", time.time() + 30)) is False
    assert store.take_permit(unique, 1, ttl=30) is None
    assert store.return_permit(held) is True


def test_a_lowered_limit_admits_nobody_until_the_holders_fall_below_it(store: onceonly.Store, unique: str) -> None:
    held = [take(store, unique, 3) for _ in range(3)]
    assert store.take_permit(unique, 2, ttl=30) is None  # 3 holders, limit now 2
    assert store.return_permit(held[0]) is True
    assert store.take_permit(unique, 2, ttl=30) is None  # 2 holders: still at the new limit
    assert store.return_permit(held[1]) is True
    take(store, unique, 2)  # 1 holder: room for one
    assert store.take_permit(unique, 2, ttl=30) is None


def test_a_raised_limit_admits_at_once(store: onceonly.Store, unique: str) -> None:
    take(store, unique, 2)
    take(store, unique, 2)
    assert store.take_permit(unique, 2, ttl=30) is None
    take(store, unique, 4)
    take(store, unique, 4)
    assert store.take_permit(unique, 4, ttl=30) is None


def test_semaphores_are_apart_from_each_other_and_from_leases(store: onceonly.Store, unique: str) -> None:
    assert store.acquire(unique, ttl=30) is not None
    take(store, unique, 1)
    take(store, f"{unique}-other", 1)
    assert store.take_permit(unique, 1, ttl=30) is None
    assert store.acquire(unique, ttl=30) is None  # the lease is still held, untouched


def test_the_largest_limit_is_accepted(store: onceonly.Store, unique: str) -> None:
    take(store, unique, MAX_PERMIT_LIMIT)


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "5", None, MAX_PERMIT_LIMIT + 1, 2**63])
def test_a_bad_limit_is_a_clear_error(store: onceonly.Store, unique: str, limit: object) -> None:
    with pytest.raises(onceonly.ConfigError, match="limit"):
        store.take_permit(unique, limit, ttl=30)  # type: ignore[arg-type]
    take(store, unique, 1)  # nothing was taken
    assert store.take_permit(unique, 1, ttl=30) is None


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf"), 1e300, "10", None, True])
def test_a_bad_ttl_is_a_clear_error(store: onceonly.Store, unique: str, ttl: object) -> None:
    with pytest.raises(onceonly.ConfigError, match="ttl"):
        store.take_permit(unique, 1, ttl=ttl)  # type: ignore[arg-type]
    take(store, unique, 1)


@pytest.mark.parametrize("name", ["", None, 7, "x" * 600, "a\x00b"])
def test_a_bad_name_is_a_clear_error(store: onceonly.Store, name: object) -> None:
    with pytest.raises(onceonly.ConfigError, match="name"):
        store.take_permit(name, 1, ttl=30)  # type: ignore[arg-type]


@pytest.mark.parametrize("permit", [None, "permit", onceonly.Permit("", "ab", 1.0),
                                    onceonly.Permit("x", "", 1.0), onceonly.Permit("x", 7, 1.0)],  # type: ignore[arg-type]
                         ids=["None", "str", "empty-name", "empty-holder", "int-holder"])
def test_a_bad_permit_is_a_clear_error(store: onceonly.Store, permit: object) -> None:
    with pytest.raises(onceonly.ConfigError, match="permit"):
        store.return_permit(permit)  # type: ignore[arg-type]


def test_take_permits_takes_each_want_in_order(store: onceonly.Store, unique: str) -> None:
    full, free, twice = f"{unique}-full", f"{unique}-free", f"{unique}-twice"
    take(store, full, 1)
    permits = store.take_permits([(free, 2), (full, 1), (twice, 2), (twice, 2), (twice, 2)], ttl=30)
    assert [p is not None for p in permits] == [True, False, True, True, False]
    assert [p.name for p in permits if p is not None] == [free, twice, twice]
    assert len({p.holder for p in permits if p is not None}) == 3
    assert all(p.expires_at > time.time() + 20 for p in permits if p is not None)
    assert store.take_permit(twice, 2, ttl=30) is None  # both places held
    assert store.take_permits([], ttl=30) == []
    for permit in permits:
        if permit is not None:
            assert store.return_permit(permit) is True
    take(store, twice, 2)


@pytest.mark.parametrize("wants", [[("x", 0)], [("", 1)], [("x",)], "x", None, [["x", 1]]])
def test_bad_wants_are_a_clear_error_and_take_nothing(store: onceonly.Store, unique: str, wants: object) -> None:
    good = (unique, 1)
    with pytest.raises(onceonly.ConfigError):
        store.take_permits([good, *wants] if isinstance(wants, list) else wants, ttl=30)  # type: ignore[arg-type]
    take(store, unique, 1)


def test_return_permits_returns_each_in_order(store: onceonly.Store, unique: str) -> None:
    a, b = f"{unique}-a", f"{unique}-b"
    stale = take(store, a, 3, ttl=0.3)
    time.sleep(0.6)
    live_a, live_b, other_b = take(store, a, 3), take(store, b, 2), take(store, b, 2)
    never = onceonly.Permit(b, "never-taken", time.time() + 30)
    assert store.return_permits([live_b, stale, live_a, never, live_b]) == [True, False, True, False, False]
    assert store.return_permits([]) == []
    assert store.take_permit(b, 2, ttl=30) is not None  # live_b's place is free again
    assert store.take_permit(b, 2, ttl=30) is None  # other_b still holds the other
    assert store.return_permit(other_b) is True
    assert [store.take_permit(a, 1, ttl=30) is not None, store.take_permit(a, 1, ttl=30)] == [True, None]


@pytest.mark.parametrize("permits", [None, "permit", [None], onceonly.Permit("x", "ab", 1.0)])
def test_bad_permits_are_a_clear_error_and_return_nothing(store: onceonly.Store, unique: str,
                                                          permits: object) -> None:
    held = take(store, unique, 1)
    given = [held, *permits] if isinstance(permits, list) else permits
    with pytest.raises(onceonly.ConfigError):
        store.return_permits(given)  # type: ignore[arg-type]
    assert store.take_permit(unique, 1, ttl=30) is None  # nothing was returned
