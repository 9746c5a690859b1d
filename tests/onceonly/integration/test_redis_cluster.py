"""The Redis store on a real local Redis Cluster (3 primaries, 3 replicas on
loopback, the session's own): one script on one slot per operation, a worker
loop one round trip per batch, and the URL mistakes a user can make, each a
clear ConfigError that writes nothing."""

from __future__ import annotations

import dataclasses
import secrets
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
import redis

import onceonly
from onceonly_cli.testing.redis_cluster import LocalCluster
from onceonly_cli.testing.servers import LocalServers
from tests.support.servers.redis_servers import private_redis
from tests.support.servers.scratch import with_prefix


def _evalsha_per_node(cluster: LocalCluster) -> dict[int, int]:
    counts = {}
    for node in cluster.live_nodes():
        with cluster.client(node.port) as client:
            stats = client.info("commandstats")
        counts[node.port] = int(stats.get("cmdstat_evalsha", {}).get("calls", 0))
    return counts


def _reset_stats(cluster: LocalCluster) -> None:
    for node in cluster.live_nodes():
        with cluster.client(node.port) as client:
            client.config_resetstat()


def test_keys_of_a_lease_and_of_a_queue_share_one_slot(redis_cluster: LocalCluster, unique: str) -> None:
    url = with_prefix(redis_cluster.url, f"slots-{secrets.token_hex(3)}")
    store = onceonly.connect(url)
    try:
        assert store.acquire(unique, ttl=30) is not None
        queue = store.queue(unique)
        queue.put("a", due_at=0)
        queue.put("b", due_at=4102444800)
        assert len(queue.claim(limit=5, lease=30)) == 1
    finally:
        store.close()
    with redis.RedisCluster.from_url(redis_cluster.url.split("?")[0], decode_responses=True) as client:
        keys = [key for key in client.scan_iter(match=f"{url.split('prefix=')[1]}:*", target_nodes="primaries")]
        slots = {key: client.keyslot(key) for key in keys}
    queue_keys = [k for k in keys if "{q:" in k]
    assert len(keys) == 3 and len(queue_keys) == 2
    assert len({slots[k] for k in queue_keys}) == 1  # one hash tag: one slot, one node


def test_worker_loop_on_a_cluster_is_one_script_call_per_batch(
    redis_cluster: LocalCluster, redis_cluster_url: str, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = onceonly.connect(redis_cluster_url)
    queue = store.queue(unique)
    queue.put_many((f"i{n}", None, n) for n in range(100))
    queue.depth()  # every script the loop uses is loaded on the queue's node
    queue.ack_many(queue.claim(limit=1, lease=60))
    round_trips = 0
    send = redis.connection.AbstractConnection.send_packed_command

    def counting_send(conn: Any, command: Any, check_health: bool = True) -> None:
        nonlocal round_trips
        round_trips += 1
        send(conn, command, check_health)

    _reset_stats(redis_cluster)
    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting_send)
    batches, seen = 1, set()
    claims = queue.claim(limit=33, lease=60)
    while claims:
        seen.update(c.item_id for c in claims)
        claims = queue.claim(limit=33, lease=60, acks=claims)  # acks this batch, claims the next
        batches += 1
    monkeypatch.undo()
    store.close()
    assert len(seen) == 99 and batches == 4
    assert round_trips == batches
    per_node = _evalsha_per_node(redis_cluster)
    assert sum(per_node.values()) == batches and sorted(per_node.values())[-1] == batches  # all on one node


def test_a_cluster_url_at_a_single_node_is_a_config_error_and_writes_nothing() -> None:
    with private_redis() as server:
        store = onceonly.connect(f"redis://127.0.0.1:{server.port}?cluster=1&prefix=wrong")
        with pytest.raises(onceonly.ConfigError, match="not a cluster.*remove cluster=1"):
            store.acquire("job", ttl=30)
        with server.client() as client:
            assert client.dbsize() == 0


def test_a_plain_url_at_a_cluster_node_is_a_config_error_and_writes_nothing(redis_cluster: LocalCluster) -> None:
    """setup() asks the node (INFO cluster); without it, a call on a key that
    another node holds is answered MOVED, which proves the script did not run."""
    prefix = f"plain-{secrets.token_hex(3)}"
    with redis.RedisCluster.from_url(redis_cluster.url.split("?")[0]) as client:
        owner = client.nodes_manager.get_node_from_slot(client.keyslot(f"{prefix}:{{lease:job}}"))
        elsewhere = next(n for n in redis_cluster.primaries() if n.port != owner.port)
    store = onceonly.connect(f"redis://127.0.0.1:{elsewhere.port}/0?prefix={prefix}")
    with pytest.raises(onceonly.ConfigError, match="cluster node.*add cluster=1"):
        store.setup()
    with pytest.raises(onceonly.ConfigError, match="cluster node.*MOVED.*add cluster=1"):
        store.acquire("job", ttl=30)
    store.close()
    with redis.RedisCluster.from_url(redis_cluster.url.split("?")[0]) as client:
        assert list(client.scan_iter(match=f"{prefix}:*", target_nodes="primaries")) == []


@pytest.mark.parametrize("where", ["/2", "/0?db=3&"])
def test_a_database_number_on_a_cluster_url_is_a_config_error(redis_cluster: LocalCluster, where: str) -> None:
    port = redis_cluster.nodes[0].port
    url = f"redis://127.0.0.1:{port}{where}" + ("&" if "?" in where else "?") + "cluster=1"
    with pytest.raises(onceonly.ConfigError, match="only database 0"):
        onceonly.connect(url.replace("&&", "&"))


def test_database_zero_on_a_cluster_url_is_its_one_database(redis_cluster: LocalCluster, unique: str) -> None:
    store = onceonly.connect(f"redis://127.0.0.1:{redis_cluster.nodes[1].port}/0?cluster=1&prefix={unique}")
    try:
        assert store.acquire("job", ttl=30) is not None
    finally:
        store.close()


def test_the_eviction_check_reads_every_primary() -> None:
    """One primary that may evict is enough to refuse: the store's keys live on all of them."""
    servers = LocalServers()
    try:
        cluster = servers.redis_cluster()
        with cluster.client(cluster.replicas()[-1].port) as replica:
            primary_port = int(replica.info("replication")["master_port"])
        with cluster.client(primary_port) as primary:
            primary.config_set("maxmemory-policy", "volatile-lru")
        store = onceonly.connect(cluster.url)
        with pytest.raises(onceonly.ConfigError, match="'volatile-lru'"):
            store.setup()
        # each call reads the policy of the node it runs on
        with redis.RedisCluster.from_url(cluster.url.split("?")[0]) as client:
            names = [f"job-{n}" for n in range(200)]
            owners = {name: client.nodes_manager.get_node_from_slot(client.keyslot(f"onceonly:{{lease:{name}}}")).port
                      for name in names}
        evicting = next(name for name in names if owners[name] == primary_port)
        safe = next(name for name in names if owners[name] != primary_port)
        with pytest.raises(onceonly.ConfigError, match="'volatile-lru'"):
            store.acquire(evicting, ttl=30)
        assert store.acquire(safe, ttl=30) is not None
        store.close()
        opted_out = onceonly.connect(f"{cluster.url}&allow_eviction=1")
        assert opted_out.acquire("job", ttl=30) is not None
        opted_out.close()
    finally:
        servers.stop()


def test_a_node_whose_port_was_taken_before_it_bound_starts_again_on_new_ports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process (a test worker starting its own servers) takes the port
    free_port picked for a node before the node binds it: the node exits, and
    the cluster starts it again on new ports instead of failing."""
    from onceonly_cli.testing import redis_cluster as module

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    ports = iter([taken.getsockname()[1]])
    real_free_port = module.free_port
    monkeypatch.setattr(module, "free_port", lambda: next(ports, None) or real_free_port())
    processes: list[subprocess.Popen[bytes]] = []
    cluster = module.LocalCluster(tmp_path, processes.append)
    try:
        url = cluster.start()
        assert taken.getsockname()[1] not in {node.port for node in cluster.nodes}
        assert len(processes) == 2 * module.PRIMARIES + 1  # the node that exited, and its second start
        # An open port is not enough: what answers there must be the node's own process
        # (the node may not have exited yet when its port is first checked).
        first = cluster.nodes[0]
        assert cluster._serves(first)
        assert not cluster._serves(dataclasses.replace(first, port=taken.getsockname()[1]))
        assert not cluster._serves(dataclasses.replace(first, port=cluster.nodes[1].port))
        store = onceonly.connect(url)
        assert store.acquire("port-taken", ttl=5) is not None
        store.close()
    finally:
        taken.close()
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
