"""Failover-safe fencing tokens on Redis.

Redis replicates asynchronously: a grant the primary acknowledged can be lost
when a replica is promoted, and the promoted replica then grants the name
again while its first holder still runs (with a higher token: tokens are
floored by the server's clock, so even then no token is handed out twice).
Here a real primary and replica run on loopback ports with the replication
link going through a FaultProxy, so the test decides when the replica stops
receiving writes; the primary is SIGKILLed and the replica
promoted (REPLICAOF NO ONE), as a Sentinel or ElastiCache failover would."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import onceonly
from tests.support.servers.faultproxy import FaultProxy
from tests.support.servers.redis_servers import RedisProcess, private_redis

DURABLE = "wait_replicas=1&wait_timeout_ms=1000"


@pytest.fixture
def cluster() -> Iterator[tuple[RedisProcess, RedisProcess, FaultProxy]]:
    """(primary, replica, the replication link)."""
    with private_redis() as primary, private_redis() as replica, FaultProxy(primary.port) as link:
        replica.replicate(link.port)
        yield primary, replica, link


def fail_over(primary: RedisProcess, replica: RedisProcess) -> onceonly.Store:
    primary.kill()
    replica.promote()
    return onceonly.connect(replica.url)


def test_durable_mode_tokens_strictly_increase_across_a_failover(
    cluster: tuple[RedisProcess, RedisProcess, FaultProxy], unique: str
) -> None:
    primary, replica, link = cluster
    store = onceonly.connect(f"{primary.url}?{DURABLE}")
    queue = store.queue(unique)
    lease = store.acquire(unique, ttl=30)
    assert lease is not None and store.release(lease)
    queue.put("item", due_at=0)
    (claim,) = queue.claim(limit=1, lease=30)
    assert queue.retry(claim, due_at=0)
    handed_leases, handed_claims = [lease.token], [claim.token]

    link.blackhole()  # the replica stops hearing from the primary
    with pytest.raises(onceonly.StoreUnavailableError, match="replicas"):
        store.acquire(unique, ttl=30)  # granted on the primary alone: not handed out
    with pytest.raises(onceonly.StoreUnavailableError, match="replicas"):
        queue.claim(limit=1, lease=30)
    store.close()

    promoted = fail_over(primary, replica)
    lease_after = promoted.acquire(unique, ttl=30)
    (claim_after,) = promoted.queue(unique).claim(limit=1, lease=30)
    handed_leases.append(lease_after.token if lease_after else -1)
    handed_claims.append(claim_after.token)
    # every token handed out once, increasing (and nothing was handed out during the outage)
    assert -1 not in handed_leases and handed_leases == sorted(set(handed_leases))
    assert handed_claims == sorted(set(handed_claims))
    promoted.close()


def test_without_wait_a_failover_grants_twice_with_distinct_tokens(
    cluster: tuple[RedisProcess, RedisProcess, FaultProxy], unique: str
) -> None:
    """The hole durable mode closes, shown: keep it in mind before turning it off.
    Two holders at once; the clock floor still gives the later one the higher
    token, so writes fenced with the token keep only the later holder's."""
    primary, replica, link = cluster
    store = onceonly.connect(primary.url)
    first = store.acquire(unique, ttl=30)
    assert first is not None and store.release(first)
    replica.caught_up_with(primary)

    link.blackhole()
    before_failover = store.acquire(unique, ttl=30)  # acknowledged by the primary only
    store.close()
    promoted = fail_over(primary, replica)
    after_failover = promoted.acquire(unique, ttl=30)
    promoted.close()

    assert before_failover is not None and after_failover is not None
    assert before_failover.owner != after_failover.owner  # both granted, both still held
    assert first.token < before_failover.token < after_failover.token


def test_durable_mode_refuses_a_wait_longer_than_the_socket_timeout() -> None:
    with pytest.raises(onceonly.ConfigError, match="wait_timeout_ms"):
        onceonly.connect("redis://127.0.0.1:6379/0?timeout=1&wait_replicas=1&wait_timeout_ms=500")
