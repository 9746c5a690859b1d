"""Redis eviction: under any maxmemory-policy but
noeviction, Redis deletes keys when memory fills, and a completed tick's
record (it has an expiry) goes first under every volatile-* policy: the tick
then runs again (with a higher token: tokens are floored by the server's
clock, so they do not repeat). The store reads the policy (INFO memory)
inside every script, in the same atomic step as its write, and on setup(),
and refuses any other policy with a ConfigError unless the URL opts out
(allow_eviction=1). A policy changed on a running server stops the very
next call.

Every server here is a private redis-server started with the policy under
test, on a free loopback port, stopped when the test ends."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import onceonly
from onceonly.redis import RedisStore
from tests.support.servers.redis_servers import RedisProcess, private_redis

EVICTING_POLICIES = ["volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl",
                     "allkeys-lru", "allkeys-lfu", "allkeys-random"]
TICK_EVENT = {"source": "aws.events", "detail-type": "Scheduled Event", "id": "delivery-1",
              "time": "2026-12-01T02:00:00Z", "detail": {}}


@pytest.fixture
def evicting_redis(request: pytest.FixtureRequest) -> Iterator[RedisProcess]:
    with private_redis("--maxmemory-policy", request.param) as server:
        yield server


def info_calls(server: RedisProcess) -> int:
    with server.client() as client:
        return int(client.info("commandstats").get("cmdstat_info", {}).get("calls", 0))


def test_noeviction_works_and_is_checked_inside_every_call() -> None:
    with private_redis("--maxmemory-policy", "noeviction") as server:
        store = onceonly.connect(server.url)
        store.setup()
        assert store.acquire("lease", ttl=30) is not None
        store.queue("q").put("item")
        assert len(store.queue("q").claim(limit=5, lease=30)) == 1
        store.close()

        fresh = onceonly.connect(server.url)  # a new process's first connect: no setup()
        server.reset_stats()
        for n in range(5):
            assert fresh.acquire(f"lease-{n}", ttl=30) is not None
        # The check runs inside each script (INFO from Lua), not as a round trip of its own.
        assert info_calls(server) == server.evalsha_calls() == 5
        fresh.close()


@pytest.mark.parametrize("evicting_redis", EVICTING_POLICIES, indirect=True)
def test_an_evicting_policy_is_refused_before_any_work(evicting_redis: RedisProcess) -> None:
    policy = evicting_redis.client().config_get("maxmemory-policy")["maxmemory-policy"]
    store = onceonly.connect(evicting_redis.url)
    with pytest.raises(onceonly.ConfigError) as refused:
        store.setup()
    message = str(refused.value)
    assert f"maxmemory-policy is {policy!r}" in message
    assert "maxmemory-policy noeviction" in message and "parameter group" in message
    assert "allow_eviction=1" in message
    # Without setup() (a Lambda's first call): refused too, every time, writing nothing.
    calls = [lambda: store.acquire("lease", ttl=30), lambda: store.queue("q").put("item"),
             lambda: store.queue("q").claim(limit=5, lease=30), lambda: store.inspect("lease")]
    for call in calls * 2:
        with pytest.raises(onceonly.ConfigError, match=f"maxmemory-policy is '{policy}'"):
            call()
    with evicting_redis.client() as client:
        assert client.dbsize() == 0
    store.close()


@pytest.mark.parametrize("evicting_redis", EVICTING_POLICIES, indirect=True)
def test_the_url_can_accept_the_risk_explicitly(evicting_redis: RedisProcess) -> None:
    store = onceonly.connect(f"{evicting_redis.url}?allow_eviction=1")
    store.setup()
    assert store.acquire("lease", ttl=30) is not None
    store.close()
    constructed = RedisStore(evicting_redis.client(), allow_eviction=True)
    assert constructed.acquire("another", ttl=30) is not None


def test_info_that_does_not_answer_is_refused_not_trusted() -> None:
    """A server where INFO is renamed away cannot tell its policy: refused,
    as a configuration problem, not as a store outage to retry."""
    with private_redis("--rename-command", "INFO", "") as server:
        store = onceonly.connect(server.url)
        with pytest.raises(onceonly.ConfigError, match="maxmemory-policy could not be read"):
            store.acquire("lease", ttl=30)
        store.close()


@pytest.mark.parametrize("policy", ["noeviction", "volatile-lru"])
def test_a_server_that_refuses_config_is_checked_through_info(policy: str) -> None:
    """As on every ElastiCache cluster, CONFIG is refused: the policy is still
    read (INFO memory), so a safe server works and an evicting one is refused."""
    with private_redis("--maxmemory-policy", policy, "--rename-command", "CONFIG", "") as server:
        with server.client() as client, pytest.raises(redis.ResponseError, match="unknown command"):
            client.config_get("maxmemory-policy")
        store = onceonly.connect(server.url)
        try:
            if policy == "noeviction":
                store.setup()
                assert store.acquire("lease", ttl=30) is not None
            else:
                for call in (store.setup, lambda: store.acquire("lease", ttl=30)):
                    with pytest.raises(onceonly.ConfigError, match="maxmemory-policy is 'volatile-lru'"):
                        call()
        finally:
            store.close()


# -- the original bug, on the server it was reproduced on ---------------------

def _run_tick(url: str, job: str, ran: list[int]) -> dict[str, Any]:
    def body(event: Any, context: Any, tick: onceonly.Tick) -> None:
        ran.append(tick.token)

    store = onceonly.connect(url)
    try:
        return onceonly.scheduled(store, job=job, ttl=30, keep=86400)(body)(TICK_EVENT, None)
    finally:
        store.close()


def _fill_until_gone(url: str, lock: str) -> int:
    """Ordinary queue puts (no expiry) until the lock record is evicted, or
    until the server refuses writes (full, with nothing left it may evict);
    how many puts it took."""
    store = onceonly.connect(url)
    queue, chunk = store.queue("fill"), "x" * 8192
    try:
        for n in range(2000):
            if store.inspect(lock) is None:
                return n
            try:
                queue.put(f"item-{n}", payload=chunk)
            except onceonly.StoreUnavailableError as full:
                assert "maxmemory" in str(full)
                assert store.inspect(lock) is None, "memory full and the completed tick's record kept"
                return n
        raise AssertionError("2000 puts and the completed tick's record was never evicted")
    finally:
        store.close()


def test_opted_out_a_completed_tick_is_evicted_and_runs_again() -> None:
    """The risk allow_eviction=1 accepts: the completed tick's record (it has an
    expiry) is evicted while ordinary puts fill memory; the same tick then runs
    again (its token is still higher: the clock floors it)."""
    with private_redis("--maxmemory", "3mb", "--maxmemory-policy", "volatile-lru") as server:
        url, job, ran = f"{server.url}?allow_eviction=1", f"job-{secrets.token_hex(3)}", []
        assert _run_tick(url, job, ran)["status"] == "ran"
        puts = _fill_until_gone(url, f"tick:{job}:{TICK_EVENT['time']}")
        with server.client() as client:  # the spike passes: the filling queue is consumed
            client.delete("onceonly:{q:fill}:sched", "onceonly:{q:fill}:rec")
        again = _run_tick(url, job, ran)
        assert puts > 0 and again["status"] == "ran" and len(ran) == 2 and ran[1] > ran[0]


def test_not_opted_out_the_same_server_is_refused_before_the_tick_runs() -> None:
    with private_redis("--maxmemory", "3mb", "--maxmemory-policy", "volatile-lru") as server:
        ran: list[int] = []
        with pytest.raises(onceonly.ConfigError, match="'volatile-lru'"):
            _run_tick(server.url, "job", ran)
        assert ran == []
        with server.client() as client:
            assert client.dbsize() == 0


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-lru"])
def test_a_policy_changed_at_runtime_stops_the_next_grant_claim_and_renewal(policy: str) -> None:
    """ElastiCache applies a parameter group's change to a running server: a
    warm store (its first calls made under noeviction) must see it at once,
    before the server can evict a lease and grant it again."""
    with private_redis("--maxmemory", "3mb", "--maxmemory-policy", "noeviction") as server:
        store = onceonly.connect(server.url)
        store.setup()
        lease = store.acquire("held", ttl=600)
        queue = store.queue("q")
        queue.put("item")
        assert lease is not None and lease.grant_number == 1
        with server.client() as client:
            client.config_set("maxmemory-policy", policy)
            refused = [lambda: store.acquire("held", ttl=30), lambda: store.acquire("other", ttl=30),
                       lambda: store.renew(lease, ttl=600), lambda: queue.claim(limit=5, lease=30),
                       lambda: queue.put("more"), lambda: store.complete(lease, keep=60, expire=True)]
            for call in refused:
                with pytest.raises(onceonly.ConfigError, match=f"maxmemory-policy is '{policy}'"):
                    call()
            # Memory fills; under allkeys-* the lease itself is evicted.
            lease_key, filled = "onceonly:{lease:held}", 0
            while policy.startswith("allkeys") and client.exists(lease_key) and filled < 5000:
                client.set(f"fill:{filled}", "x" * 8192)
                filled += 1
            assert not (policy.startswith("allkeys") and client.exists(lease_key)), "the lease was never evicted"
            with pytest.raises(onceonly.ConfigError):
                store.acquire("held", ttl=30)  # not granted again
            client.config_set("maxmemory-policy", "noeviction")  # fixed: the next call works
            client.flushall()
        assert store.acquire("fresh", ttl=30) is not None
        store.close()
