"""The lease contract, written once, run on every backend (the `store` fixture
is parametrised over PostgreSQL, Redis and DynamoDB/dynalite)."""

from __future__ import annotations

import time

import pytest

import onceonly


def test_acquire_grants_then_contends(store: onceonly.Store, unique: str) -> None:
    lease = store.acquire(unique, ttl=30)
    assert lease is not None
    assert lease.name == unique and lease.token >= 1
    assert lease.expires_at > time.time() + 20
    assert store.acquire(unique, ttl=30) is None


def test_expired_lease_is_regranted_with_higher_token(store: onceonly.Store, unique: str) -> None:
    first = store.acquire(unique, ttl=0.3)
    assert first is not None
    time.sleep(0.6)
    second = store.acquire(unique, ttl=30)
    assert second is not None
    assert second.token > first.token
    assert second.owner != first.owner


def test_renew_extends_and_keeps_token(store: onceonly.Store, unique: str) -> None:
    lease = store.acquire(unique, ttl=0.5)
    assert lease is not None
    renewed = store.renew(lease, ttl=30)
    assert renewed.token == lease.token
    assert renewed.expires_at > lease.expires_at
    time.sleep(0.7)  # past the first ttl: the renewal keeps it held
    assert store.acquire(unique, ttl=30) is None


def test_stale_holder_is_refused_everywhere(store: onceonly.Store, unique: str) -> None:
    stale = store.acquire(unique, ttl=0.3)
    assert stale is not None
    time.sleep(0.6)
    current = store.acquire(unique, ttl=30)
    assert current is not None
    with pytest.raises(onceonly.LeaseLostError):
        store.renew(stale, ttl=30)
    assert store.release(stale) is False
    assert store.complete(stale, keep=60) is False
    # the stale writes changed nothing: the current holder still holds it
    assert store.acquire(unique, ttl=30) is None
    assert store.renew(current, ttl=30).token == current.token


def test_release_frees_the_name_once(store: onceonly.Store, unique: str) -> None:
    lease = store.acquire(unique, ttl=30)
    assert lease is not None
    assert store.release(lease) is True
    assert store.release(lease) is False
    with pytest.raises(onceonly.LeaseLostError):
        store.renew(lease)
    again = store.acquire(unique, ttl=30)
    assert again is not None and again.token > lease.token


def test_complete_blocks_until_keep_passes(store: onceonly.Store, unique: str) -> None:
    lease = store.acquire(unique, ttl=30)
    assert lease is not None
    assert store.complete(lease, keep=0.5) is True
    assert store.acquire(unique, ttl=30) is None
    assert store.complete(lease, keep=0.5) is False
    state = store.inspect(unique)
    assert state is not None and state.completed and state.token == lease.token
    time.sleep(0.8)
    later = store.acquire(unique, ttl=30)
    assert later is not None and later.token > lease.token


def test_inspect_unknown_name_is_none(store: onceonly.Store, unique: str) -> None:
    assert store.inspect(unique) is None


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf"), 1e300, "10", None, True])
def test_bad_ttl_is_a_clear_error(store: onceonly.Store, unique: str, ttl: object) -> None:
    with pytest.raises(onceonly.ConfigError, match="ttl"):
        store.acquire(unique, ttl=ttl)  # type: ignore[arg-type]
    assert store.inspect(unique) is None


@pytest.mark.parametrize("name", ["", None, 7, "x" * 600])
def test_bad_name_is_a_clear_error(store: onceonly.Store, name: object) -> None:
    with pytest.raises(onceonly.ConfigError, match="name"):
        store.acquire(name, ttl=5)  # type: ignore[arg-type]


def test_setup_is_idempotent(store: onceonly.Store, unique: str) -> None:
    store.setup()
    store.setup()
    assert store.acquire(unique, ttl=5) is not None
