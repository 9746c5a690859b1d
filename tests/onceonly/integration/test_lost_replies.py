"""A lost reply is never retried into a false "contention".

The first reply of a grant is lost on the wire (FaultProxy.lose_replies(once=True)):
the grant happened, the caller did not see it. A driver that silently sends the
call again gets "already held" / "nothing due" and the caller would be told
"contention" while the name or item sits granted to nobody. The store must
instead raise StoreUnavailableError (retry may help) and must not have run the
script twice."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

import onceonly
from onceonly.redis import RedisStore
from tests.support.servers.faultproxy import FaultProxy
from tests.support.servers.proxied import target_port, through
from tests.support.servers.redis_servers import RedisProcess, private_redis


@pytest.fixture
def redis_behind_proxy() -> Iterator[tuple[RedisProcess, FaultProxy]]:
    """A Redis of this test's own (its command counts are ours alone), behind a proxy."""
    with private_redis() as server, FaultProxy(server.port) as proxy:
        yield server, proxy


@pytest.fixture
def retrying_client(redis_behind_proxy: tuple[RedisProcess, FaultProxy]) -> Iterator[redis.Redis]:
    """A client as ``redis.Redis(...)`` builds it: it retries a command that timed out."""
    _, proxy = redis_behind_proxy
    client = redis.Redis(host="127.0.0.1", port=proxy.port, socket_timeout=0.5)
    retry = client.get_retry()
    assert retry is not None and retry.get_retries() > 0, "the test needs a client that retries"
    yield client
    client.close()


def test_redis_acquire_whose_reply_is_lost_raises_and_ran_once(
    redis_behind_proxy: tuple[RedisProcess, FaultProxy], retrying_client: redis.Redis, unique: str
) -> None:
    server, proxy = redis_behind_proxy
    store = RedisStore(retrying_client)
    assert store.acquire(f"{unique}-warm-up", ttl=30) is not None  # the script is loaded
    server.reset_stats()

    proxy.lose_replies(once=True)
    with pytest.raises(onceonly.StoreUnavailableError):
        store.acquire(unique, ttl=30)
    proxy.passthrough()

    assert server.evalsha_calls() == 1
    state = store.inspect(unique)
    assert state is not None and state.owner and state.busy_until > time.time()  # granted (once), to nobody


def test_redis_claim_whose_reply_is_lost_raises_and_ran_once(
    redis_behind_proxy: tuple[RedisProcess, FaultProxy], retrying_client: redis.Redis, unique: str
) -> None:
    server, proxy = redis_behind_proxy
    store = RedisStore(retrying_client)
    assert store.queue(f"{unique}-warm-up").claim(limit=1, lease=30) == []  # the script is loaded
    queue = store.queue(unique)
    queue.put("item-1", due_at=time.time() - 1)
    queue.put("item-2", due_at=time.time() - 1)
    server.reset_stats()

    proxy.lose_replies(once=True)
    with pytest.raises(onceonly.StoreUnavailableError):
        queue.claim(limit=5, lease=30)
    proxy.passthrough()

    assert server.evalsha_calls() == 1
    assert queue.depth().in_flight == 2  # both held by the lost claim until its lease runs out


def test_redis_client_passed_in_keeps_its_own_retry_policy(retrying_client: redis.Redis) -> None:
    before = retrying_client.get_retry()
    RedisStore(retrying_client).acquire("anything", ttl=5)
    assert retrying_client.get_retry() is before and before is not None and before.get_retries() > 0


def test_dynamodb_write_retried_after_a_lost_reply_raises_instead_of_reporting_contention(
    dynamodb_url: str, unique: str
) -> None:
    direct = onceonly.connect(dynamodb_url)
    direct.setup()
    with FaultProxy(target_port(dynamodb_url)) as proxy:
        store = onceonly.connect(through(dynamodb_url, proxy.port, 4))  # room for botocore's one retry
        try:
            assert store.inspect(unique) is None  # a pooled HTTP connection, as in a warm container
            proxy.lose_replies(once=True)
            with pytest.raises(onceonly.StoreUnavailableError, match="earlier attempt may have been applied"):
                store.acquire(unique, ttl=30)
        finally:
            proxy.passthrough()
            store.close()
    state = direct.inspect(unique)
    assert state is not None and state.token == 1  # the first attempt did grant it
    direct.close()
