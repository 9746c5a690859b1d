"""Records that do not grow forever, on every store: a name completed with
``expire=True`` (one cron tick) is refused for its whole keep and removed after
it; a name completed without it (a long-lived lease) keeps its record, so its
token still strictly increases."""

from __future__ import annotations

import time

import pytest

import onceonly
from tests.support.stores.expiry import is_gone_after_keep, raw_lease_record, wait_past_keep

KEEP = 0.5
# Long enough for the checks inside keep to finish within it on a loaded machine
# (reading a cluster's raw record starts a cluster client of its own).
KEEP_WHILE_CHECKED = 3.0


def test_an_expiring_record_is_refused_within_keep_and_gone_after(
        store: onceonly.Store, store_url: str, unique: str) -> None:
    lease = store.acquire(unique, ttl=30)
    assert lease is not None
    assert store.complete(lease, keep=KEEP_WHILE_CHECKED, expire=True) is True
    done_until = time.time() + KEEP_WHILE_CHECKED
    assert store.acquire(unique, ttl=30) is None  # a duplicate inside keep is still refused
    state = store.inspect(unique)
    assert state is not None and state.completed and state.token == lease.token
    assert not is_gone_after_keep(store, store_url, unique)
    wait_past_keep(done_until)
    assert is_gone_after_keep(store, store_url, unique)


def test_a_kept_record_survives_its_keep_and_its_token_keeps_increasing(
        store: onceonly.Store, store_url: str, unique: str) -> None:
    lease = store.acquire(unique, ttl=30)
    assert lease is not None
    assert store.complete(lease, keep=KEEP) is True
    wait_past_keep(time.time() + KEEP)
    assert not is_gone_after_keep(store, store_url, unique)
    record = raw_lease_record(store_url, unique)
    assert record is not None and "expire_at" not in record
    assert record.get("pttl", -1) == -1  # Redis: no key expiry
    again = store.acquire(unique, ttl=30)
    assert again is not None and again.token > lease.token


def test_a_name_granted_again_after_keep_loses_its_expiry(
        store: onceonly.Store, store_url: str, unique: str) -> None:
    """If the name is granted again after keep but before the record was removed
    (DynamoDB's sweeper runs late; PostgreSQL prunes later), the new holder's
    record must not be removed under it."""
    first = store.acquire(unique, ttl=30)
    assert first is not None
    assert store.complete(first, keep=KEEP, expire=True) is True
    wait_past_keep(time.time() + KEEP)
    second = store.acquire(unique, ttl=30)
    assert second is not None
    assert not is_gone_after_keep(store, store_url, unique)
    record = raw_lease_record(store_url, unique)
    assert record is not None and "expire_at" not in record and record.get("expires") is not True
    assert record.get("pttl", -1) == -1
    assert store.renew(second, ttl=30).token == second.token


@pytest.mark.parametrize("flag", [1, "yes", None])
def test_expire_must_be_a_bool(store: onceonly.Store, unique: str, flag: object) -> None:
    lease = store.acquire(unique, ttl=30)
    assert lease is not None
    with pytest.raises(onceonly.ConfigError, match="expire"):
        store.complete(lease, keep=60, expire=flag)  # type: ignore[arg-type]
    assert store.complete(lease, keep=60) is True  # the refused call changed nothing


def test_postgres_expiring_completions_prune_what_outlived_its_keep(postgres_url: str, unique: str) -> None:
    """The bounded prune inside complete(expire=True): the guard's own
    completions remove old tick records, with no scheduled cleaner."""
    from onceonly.stores.postgres import PRUNE_PER_COMPLETE, PostgresStore

    store = PostgresStore.from_url(postgres_url)
    try:
        store.setup()
        store.prune_expired()  # earlier tests' leftovers: the batch below is the only backlog
        old = [f"{unique}-old-{i}" for i in range(PRUNE_PER_COMPLETE - 1)]
        for name in [*old, f"{unique}-kept"]:
            lease = store.acquire(name, ttl=30)
            assert lease is not None
            assert store.complete(lease, keep=KEEP, expire=name != f"{unique}-kept")
        wait_past_keep(time.time() + KEEP)
        # The loop's own completions may have pruned its first names already (a
        # slow machine); the last one can only go through the next completion.
        assert raw_lease_record(postgres_url, old[-1]) is not None
        fresh = store.acquire(f"{unique}-fresh", ttl=30)
        assert fresh is not None
        assert store.complete(fresh, keep=60, expire=True)
        assert [name for name in old if raw_lease_record(postgres_url, name) is not None] == []
        assert raw_lease_record(postgres_url, f"{unique}-kept") is not None  # long-lived: kept
        assert raw_lease_record(postgres_url, f"{unique}-fresh") is not None  # within keep: kept
        assert store.prune_expired() == 0
    finally:
        store.close()


def test_postgres_setup_upgrades_a_table_from_before_expiry(postgres_server_url: str) -> None:
    """A leases table created without the expires column gets it from setup(),
    and its old records are kept (they were never marked to expire)."""
    import psycopg

    from onceonly.postgres import PostgresStore
    from tests.support.servers.scratch import scratch_database

    with scratch_database(postgres_server_url, "onceonly_upgrade") as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE onceonly_leases (name text PRIMARY KEY, owner text, token bigint NOT NULL, "
                         "busy_until timestamptz NOT NULL, completed boolean NOT NULL DEFAULT false)")
            conn.execute("INSERT INTO onceonly_leases VALUES ('tick:old:2020-01-01T00:00:00Z', 'o', 3, "
                         "'2020-01-08', true)")
        store = PostgresStore.from_url(url)
        try:
            store.setup()
            store.setup()  # idempotent once the column is there
            assert store.prune_expired() == 0
            record = raw_lease_record(url, "tick:old:2020-01-01T00:00:00Z")
            assert record is not None and record["expires"] is False and record["token"] == 3
            again = store.acquire("tick:old:2020-01-01T00:00:00Z", ttl=30)
            assert again is not None and again.token == 4
            assert store.complete(again, keep=60, expire=True)
        finally:
            store.close()
