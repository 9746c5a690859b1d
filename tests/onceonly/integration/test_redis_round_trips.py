"""Round trips of the Redis queue, counted twice over on a private redis-server
that nothing else talks to: on the client (every request written to a socket)
and on the server (INFO commandstats). A worker loop with ``claim(acks=…)`` is
one round trip and one command per batch; ``put_many`` is one for the batch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

import onceonly
from onceonly.redis import RedisStore
from tests.support.servers.redis_servers import RedisProcess, private_redis


class Counted:
    """The store on a private server, with both counters."""

    def __init__(self, server: RedisProcess, monkeypatch: pytest.MonkeyPatch) -> None:
        self.server = server
        self.store = RedisStore(redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=10))
        self.round_trips = 0
        send = redis.connection.AbstractConnection.send_packed_command

        def counting_send(conn: Any, command: Any, check_health: bool = True) -> None:
            self.round_trips += 1
            send(conn, command, check_health)

        monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting_send)

    def reset(self) -> None:
        self.server.reset_stats()
        self.round_trips = 0

    def server_commands(self) -> dict[str, int]:
        """Commands the server ran since reset(), without the counting's own."""
        with self.server.client() as client:
            stats = client.info("commandstats")
        return {name.removeprefix("cmdstat_"): int(stat["calls"]) for name, stat in stats.items()
                if name not in ("cmdstat_config|resetstat", "cmdstat_info", "cmdstat_hello")}


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counted]:
    with private_redis() as server:
        counted = Counted(server, monkeypatch)
        # Load every queue script once (the first call of each is NOSCRIPT, then SCRIPT LOAD).
        warm = counted.store.queue("warm-up")
        warm.put("w")
        warm.ack_many(warm.claim(limit=1, lease=60))
        warm.depth()
        yield counted
        counted.store.close()


def test_put_many_is_one_round_trip(counted: Counted) -> None:
    q = counted.store.queue("q")
    counted.reset()
    assert q.put_many((f"i{n}", None, {"n": n}) for n in range(5000)) == 5000
    assert counted.round_trips == 1
    # One script call; inside it one command per step, in chunks of 1,000
    # arguments (Lua's unpack stops near 8,000): 5,000 ids, 10,000 field/value
    # and score/member arguments.
    assert counted.server_commands() == {"evalsha": 1, "time": 1, "hmget": 5, "hset": 10, "zadd": 10}
    assert q.depth() == onceonly.QueueDepth(due=5000, scheduled=0, in_flight=0)


def test_worker_loop_with_acks_is_one_round_trip_per_batch(counted: Counted) -> None:
    q = counted.store.queue("q")
    q.put_many((f"i{n}", None, n) for n in range(100))
    counted.reset()
    claims = q.claim(limit=25, lease=60)
    batches, seen = 1, set()
    while claims:
        seen.update(c.item_id for c in claims)
        claims = q.claim(limit=25, lease=60, acks=claims)  # acks this batch, claims the next
        assert claims.acked == [True] * 25
        batches += 1
    assert seen == {f"i{n}" for n in range(100)} and batches == 5
    assert counted.round_trips == batches
    # Inside the scripts, a fixed number of commands per batch, not per item:
    # a claim is TIME, 2 ZRANGEBYSCORE (ran-out leases, then due items), HMGET,
    # HSET, ZADD; an ack is HMGET, HDEL, ZREM. The last call acks and finds nothing.
    assert counted.server_commands() == {
        "evalsha": 5, "time": 5, "zrangebyscore": 2 * 5, "hmget": 4 + 4, "hset": 4, "zadd": 4,
        "hdel": 4, "zrem": 4,
    }
    assert q.depth().total == 0


def test_ack_many_is_one_round_trip(counted: Counted) -> None:
    q = counted.store.queue("q")
    q.put_many((f"i{n}", None, None) for n in range(1500))
    claims = q.claim(limit=1000, lease=60) + q.claim(limit=1000, lease=60)
    counted.reset()
    assert q.ack_many(claims) == [True] * 1500
    assert counted.round_trips == 1
    # 1,500 acks: each command in two chunks of at most 1,000 ids
    assert counted.server_commands() == {"evalsha": 1, "time": 1, "hmget": 2, "hdel": 2, "zrem": 2}
    assert q.depth().total == 0




def test_every_lease_operation_is_one_round_trip(counted: Counted) -> None:
    store = counted.store
    warm = store.acquire("warm-up", ttl=30)  # load each lease script once
    assert warm is not None
    warm = store.renew(warm, ttl=30)
    assert store.inspect("warm-up") is not None
    assert store.complete(warm, keep=1) is True
    assert store.release(warm) is False  # completed: refused, but the script ran
    counted.reset()
    lease = store.acquire("job", ttl=30)
    assert lease is not None
    lease = store.renew(lease, ttl=30)
    assert store.inspect("job") is not None
    assert store.release(lease) is True
    lease = store.acquire("job", ttl=30)
    assert lease is not None and store.complete(lease, keep=60) is True
    assert counted.round_trips == 6
    assert counted.server_commands()["evalsha"] == 6
