"""Topology changes on a local Redis Cluster (onceonly_cli/testing/redis_cluster.py),
as an operator or ElastiCache makes them while clients run:

- a slot migrated live: ``CLUSTER SETSLOT … IMPORTING/MIGRATING``, the keys
  moved one by one with ``MIGRATE`` (pausing between them, so that a queue's
  two keys sit on different nodes for a while), then ``SETSLOT … NODE``;
- a failover: ``CLUSTER FAILOVER`` run on a replica (graceful), or the primary
  SIGKILLed and its replica promoted by the cluster itself;
- the redirect counters each node keeps (``INFO errorstats``: MOVED, ASK,
  TRYAGAIN, CLUSTERDOWN replies), the proof that clients met the change."""

from __future__ import annotations

import os
import signal
import time

import redis

from onceonly_cli.testing.redis_cluster import ClusterNodeProcess, LocalCluster

SETTLE_TIMEOUT = 30.0
REDIRECTS = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN")


def slot_of(cluster: LocalCluster, key: str) -> int:
    with cluster.client(cluster.live_nodes()[0].port) as client:
        return int(client.cluster("keyslot", key))


def node_id(cluster: LocalCluster, port: int) -> str:
    with cluster.client(port) as client:
        return str(client.execute_command("CLUSTER", "MYID"))


def owner_port(cluster: LocalCluster, slot: int) -> int:
    """The port of the primary that serves ``slot``, as the live nodes agree."""
    with cluster.client(cluster.live_nodes()[0].port) as client:
        for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
            if int(start) <= slot <= int(end):
                return int(primary[1])
    raise AssertionError(f"slot {slot} is served by nobody")


def migrate_slot(cluster: LocalCluster, slot: int, to_port: int, pause: float = 0.05) -> int:
    """Move ``slot`` to the primary on ``to_port``, key by key; the number of keys moved."""
    from_port = owner_port(cluster, slot)
    assert from_port != to_port
    source_id, target_id = node_id(cluster, from_port), node_id(cluster, to_port)
    moved = 0
    with cluster.client(from_port) as source, cluster.client(to_port) as target:
        target.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        source.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        while keys := source.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1):
            time.sleep(pause)  # clients meet the slot half moved meanwhile
            source.execute_command("MIGRATE", "127.0.0.1", to_port, "", 0, 5000, "KEYS", *keys)
            moved += len(keys)
        time.sleep(pause)
        # the target first, then the source, then everyone else (the documented order)
        for port in [to_port, from_port, *(n.port for n in cluster.primaries() if n.port not in (to_port, from_port))]:
            with cluster.client(port) as client:
                client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
    return moved


def replica_of(cluster: LocalCluster, primary_port: int) -> ClusterNodeProcess:
    for node in cluster.replicas():
        with cluster.client(node.port) as client:
            if int(client.info("replication")["master_port"]) == primary_port:
                return node
    raise AssertionError(f"the primary on {primary_port} has no replica")


def fail_over(cluster: LocalCluster, primary_port: int, *, kill: bool) -> ClusterNodeProcess:
    """Replace the primary on ``primary_port`` by its replica: ``CLUSTER
    FAILOVER`` on the replica (no acknowledged write lost), or the primary
    SIGKILLed (asynchronous replication: its last writes may be lost). Returns
    the promoted node once the cluster is ok again."""
    replica = replica_of(cluster, primary_port)
    if kill:
        primary = next(n for n in cluster.nodes if n.port == primary_port)
        os.kill(primary.process.pid, signal.SIGKILL)
        primary.process.wait(timeout=10)
    else:
        with cluster.client(replica.port) as client:
            client.execute_command("CLUSTER", "FAILOVER")
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while cluster.role(replica) != "master" or not _all_ok(cluster):
        assert time.monotonic() < deadline, f"no failover of {primary_port} to {replica.port}"
        time.sleep(0.05)
    return replica


def _all_ok(cluster: LocalCluster) -> bool:
    for node in cluster.live_nodes():
        with cluster.client(node.port) as client:
            try:
                if client.cluster("info").get("cluster_state") != "ok":
                    return False
            except redis.RedisError:
                return False
    return True


def redirects_seen(cluster: LocalCluster) -> dict[str, int]:
    """Redirect and retry replies the live nodes have given since they started."""
    seen = dict.fromkeys(REDIRECTS, 0)
    for node in cluster.live_nodes():
        with cluster.client(node.port) as client:
            stats = client.info("errorstats")
        for name in REDIRECTS:
            seen[name] += int(stats.get(f"errorstat_{name}", {}).get("count", 0))
    return seen
