"""Wiring of the Redis store on fakeredis: URL handling, error translation,
script registration. Exactly-once is proven on the real Redis (tests/contract,
tests/concurrency), not here."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
import redis

import onceonly
from onceonly.stores.redis import SCRIPT_NAMES, SCRIPT_SOURCES, RedisStore, script_file


class CountingClient(fakeredis.FakeRedis):
    """Counts the commands sent through the client (not the scripts' own)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: list[str] = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.commands.append(str(args[0]).upper())
        return super().execute_command(*args, **options)


@pytest.fixture
def server() -> fakeredis.FakeServer:
    return fakeredis.FakeServer()


@pytest.fixture
def client(server: fakeredis.FakeServer) -> Iterator[CountingClient]:
    c = CountingClient(server=server)
    yield c
    c.close()


@pytest.fixture
def store(client: CountingClient) -> RedisStore:
    # fakeredis has no INFO (so no maxmemory-policy to check) and never evicts.
    return RedisStore(client, prefix="unit", allow_eviction=True)


def test_every_script_file_documents_its_interface() -> None:
    for name in SCRIPT_NAMES:
        source = script_file(name)
        header = source.split("\nlocal", 1)[0]
        for part in ("KEYS", "ARGV", "Returns", "Race closed"):
            assert part in header, f"lua/{name}.lua header lacks {part}"
        assert not re.search(r"""['"]\w*:\{""", source), f"redis_{name}.lua builds a key name itself"
        assert SCRIPT_SOURCES[name] == script_file("common") + source  # the shared helpers come first


def test_scripts_hashed_once_per_store_and_run_by_sha(
    store: RedisStore, client: CountingClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[str] = []
    connection_class = client.connection_pool.connection_class
    pack = connection_class.pack_commands
    monkeypatch.setattr(connection_class, "pack_commands",
                        lambda conn, commands: sent.extend(str(c[0]) for c in commands) or pack(conn, commands))
    shas = dict(store._shas)
    assert shas == {name: client.register_script(SCRIPT_SOURCES[name]).sha for name in SCRIPT_NAMES}
    for _ in range(2):
        lease = store.acquire(f"job-{_}", ttl=5)
        assert lease is not None
        queue = store.queue("q")
        queue.put("a")
        (claim,) = queue.claim(limit=5, lease=5)
        assert queue.ack(claim) is True
    assert store._shas == shas  # queues reuse the store's scripts
    assert set(sent) == {"EVALSHA"}
    # each script is loaded once, on the first NOSCRIPT, then run by its SHA
    # (acquire, put, claim; ack is the claim script with limit 0)
    assert client.commands == ["SCRIPT LOAD"] * 3


def test_keys_carry_the_prefix_and_one_hash_tag_per_queue(
    store: RedisStore, server: fakeredis.FakeServer
) -> None:
    store.acquire("job", ttl=5)
    store.queue("mail").put("a", due_at=1.0)
    store.queue("mail").claim(limit=1, lease=5)
    keys = sorted(fakeredis.FakeRedis(server=server, decode_responses=True).keys("*"))
    assert keys == ["unit:{lease:job}", "unit:{q:mail}:rec", "unit:{q:mail}:sched"]


def test_from_url_strips_prefix_and_sets_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_from_url(url: str, **kwargs: Any) -> fakeredis.FakeRedis:
        seen.update(url=url, **kwargs)
        return fakeredis.FakeRedis()

    monkeypatch.setattr(redis.Redis, "from_url", staticmethod(fake_from_url))
    store = onceonly.connect("redis://127.0.0.1:6379/2?prefix=app&socket_keepalive=true&allow_eviction=1")
    assert isinstance(store, RedisStore) and store.kind == "redis"
    assert store._prefix == "app" and store._allow_eviction
    assert seen["url"] == "redis://127.0.0.1:6379/2?socket_keepalive=true"
    assert 0 < seen["socket_connect_timeout"] <= 10 and 0 < seen["socket_timeout"] <= 10
    assert onceonly.connect("rediss://127.0.0.1:6380/0")._prefix == "onceonly"  # type: ignore[attr-defined]


@pytest.mark.parametrize("url", ["redis://127.0.0.1:notaport/0", "redis://127.0.0.1:6379/0?prefix=",
                                 "redis://127.0.0.1:6379/0?socket_timeout=soon",
                                 "redis://127.0.0.1:6379/0?allow_eviction=maybe"])
def test_malformed_url_is_a_config_error(url: str) -> None:
    with pytest.raises(onceonly.ConfigError):
        onceonly.connect(url)


def test_close_closes_only_a_client_it_built(client: CountingClient, monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[bool] = []
    monkeypatch.setattr(client, "close", lambda: closed.append(True))
    RedisStore(client).close()
    assert closed == []
    RedisStore(client, owns_client=True).close()
    assert closed == [True]


def test_unreachable_server_is_store_unavailable(store: RedisStore, server: fakeredis.FakeServer) -> None:
    server.connected = False
    calls = [store.setup, lambda: store.acquire("job"), lambda: store.queue("q").claim(),
             lambda: store.queue("q").depth(), lambda: store.inspect("job")]
    for call in calls:
        with pytest.raises(onceonly.StoreUnavailableError, match="Redis store unreachable during") as info:
            call()
        assert isinstance(info.value.__cause__, redis.ConnectionError)


def test_server_error_is_store_unavailable(store: RedisStore, client: CountingClient) -> None:
    client.set("unit:{lease:job}", "not a hash")  # WRONGTYPE inside the script
    with pytest.raises(onceonly.StoreUnavailableError, match="Redis store error during acquire") as info:
        store.acquire("job")
    assert isinstance(info.value.__cause__, redis.RedisError)


def test_replies_decoded_by_the_client_work_too(server: fakeredis.FakeServer) -> None:
    store = RedisStore(fakeredis.FakeRedis(server=server, decode_responses=True), allow_eviction=True)
    lease = store.acquire("job", ttl=5)
    assert lease is not None
    state = store.inspect("job")
    assert state is not None and state.owner == lease.owner
    store.queue("q").put("a", payload={"x": "é"})
    (claim,) = store.queue("q").claim()
    assert (claim.item_id, claim.payload) == ("a", {"x": "é"})
