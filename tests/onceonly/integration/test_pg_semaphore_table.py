"""PostgreSQL: the counting semaphores' table (onceonly_semaphores) arrived
after leases and queues. An install from before it (its other tables in use)
gets it from setup(), keeps its leases and items, and until then a take says
to run setup() instead of failing as unreachable."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

import onceonly
from tests.support.servers.scratch import scratch_database


@pytest.fixture
def older_install(postgres_server_url: str) -> Iterator[str]:
    """A database set up as before the semaphore table existed, with a lease held and an item waiting."""
    with scratch_database(postgres_server_url, "onceonly_semaphores") as url:
        store = onceonly.connect(url)
        store.setup()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP TABLE onceonly_semaphores")
        assert store.acquire("held", ttl=60) is not None
        store.queue("q").put("kept")
        store.close()
        yield url


def test_setup_adds_the_semaphore_table_to_an_older_install(older_install: str) -> None:
    store = onceonly.connect(older_install)
    try:
        with pytest.raises(onceonly.StoreNotReadyError, match="setup"):
            store.take_permit("endpoint", 1, ttl=30)
        store.setup()
        store.setup()  # idempotent
        assert store.take_permit("endpoint", 1, ttl=30) is not None
        assert store.take_permit("endpoint", 1, ttl=30) is None
        assert store.acquire("held", ttl=60) is None  # the older install's lease is still held
        assert [c.item_id for c in store.queue("q").claim(limit=5, lease=30)] == ["kept"]
    finally:
        store.close()
