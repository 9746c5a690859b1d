"""The Redis store on a Redis Cluster (cluster-mode ElastiCache, ElastiCache
Serverless, MemoryDB) through redis-py's ``RedisCluster``.

Every script's keys share one hash tag, so a call is ONE script on ONE slot,
sent to the primary that owns the slot on one of that node's pooled
connections, exactly once. Topology changes answer a call with an error reply
that the server gives BEFORE running anything, so only those are followed:

- ``MOVED`` (the slot moved, or a replica was promoted): update the slot's
  owner, send again there;
- ``ASK`` (the slot is migrating and the key is already on the target): send
  ``ASKING`` + the call to the target, once, without updating the map;
- ``TRYAGAIN`` (a multi-key call mid-migration: some keys moved, some not) and
  ``CLUSTERDOWN`` (a failover in progress): wait a little, send again;
- ``NOSCRIPT`` (a node that never saw the script, e.g. a new primary): load
  it there, send again;
- a node that cannot be connected to (its primary was killed): nothing was
  sent; re-read the topology, send again.

Any other failure after the call was sent (a reply lost, a timeout) may have
run it: StoreUnavailableError, never a resend, as on one node. No new try
starts once the store's timeout has passed.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    NoScriptError,
    ReadOnlyError,
    RedisClusterException,
    TryAgainError,
)

from ...errors import ConfigError
from .nodes import borrow, exchange, tls_explained

# Between two tries of a call the cluster refused for now (TRYAGAIN, CLUSTERDOWN,
# an unreachable node): a migration step or a failover takes milliseconds to seconds.
PAUSE_SECONDS = 0.05


def cluster_error(exc: RedisClusterException) -> Exception:
    """redis-py's cluster errors are not RedisErrors: a node without cluster
    mode is a ConfigError, the rest (no node reachable) a ConnectionError."""
    text = str(exc)
    if "Cluster mode is not enabled" in text or "cluster support disabled" in text.lower():
        return ConfigError(
            f"the Redis server is not a cluster ({text}): remove cluster=1 from the store URL,"
            " or point it at a cluster's configuration endpoint"
        )
    return redis.ConnectionError(f"Redis cluster: {text}")


class ClusterNodes:
    """The store's keys on a cluster. ``connect`` builds the ``RedisCluster``
    client (it reads the topology, so it runs on first use, not at import)."""

    def __init__(self, connect: Callable[[], RedisCluster], socket_timeout: float | None, budget: float,
                 tls: bool = False) -> None:
        self._connect = connect
        self.tls = tls
        self._client: RedisCluster | None = None
        self._connecting = threading.Lock()  # one client, whichever thread asks first
        self.socket_timeout = socket_timeout
        self._budget = budget  # seconds a call may spend following redirects

    @property
    def client(self) -> RedisCluster:
        with self._connecting:
            if self._client is None:
                try:
                    self._client = self._connect()
                except RedisClusterException as exc:
                    raise cluster_error(exc) from exc
            return self._client

    def run(self, key: str, commands: Sequence[tuple[Any, ...]], source: str) -> list[Any]:
        with tls_explained(self.tls):
            return self._run(key, commands, source)

    def _run(self, key: str, commands: Sequence[tuple[Any, ...]], source: str) -> list[Any]:
        client = self.client
        slot = client.keyslot(key)
        deadline = time.monotonic() + self._budget
        asking: ClusterNode | None = None
        last: Exception | None = None
        while True:
            if last is not None and time.monotonic() > deadline:
                raise redis.ConnectionError(f"Redis cluster: slot {slot} still unavailable: {last}") from last
            node = asking or self._owner(client, slot)
            pool = client.get_redis_connection(node).connection_pool
            try:
                conn = borrow(pool)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                last = exc  # nothing sent: the node is gone (a failover?)
                self._pause_and_refresh(client)
                asking = None
                continue
            batch = [("ASKING",), *commands] if asking else list(commands)
            replies = exchange(pool, conn, batch)
            if asking:
                replies = replies[1:]
            first = replies[0]
            if isinstance(first, NoScriptError):
                client.get_redis_connection(node).script_load(source)
                last = first
            elif isinstance(first, MovedError):
                client.nodes_manager.move_slot(first)
                asking, last = None, first
            elif isinstance(first, AskError):
                asking, last = self._node_at(client, first.host, first.port), first
            elif isinstance(first, (TryAgainError, ClusterDownError, ReadOnlyError)):
                last = first
                self._pause_and_refresh(client, refresh=not isinstance(first, TryAgainError))
                asking = None if not isinstance(first, TryAgainError) else asking
            else:
                return replies

    @staticmethod
    def _owner(client: RedisCluster, slot: int) -> ClusterNode:
        try:
            return client.nodes_manager.get_node_from_slot(slot)
        except RedisClusterException as exc:  # slot not covered right now
            raise cluster_error(exc) from exc

    @staticmethod
    def _node_at(client: RedisCluster, host: str, port: int) -> ClusterNode:
        node = client.get_node(host=host, port=port)
        if node is None:  # a node the map does not list yet
            client.nodes_manager.initialize()
            node = client.get_node(host=host, port=port)
        if node is None:
            raise redis.ConnectionError(f"Redis cluster: redirected to unknown node {host}:{port}")
        return node

    @staticmethod
    def _pause_and_refresh(client: RedisCluster, refresh: bool = True) -> None:
        time.sleep(PAUSE_SECONDS)
        if refresh:
            # still failing over: the next try pauses and reads the topology again
            with contextlib.suppress(redis.RedisError, RedisClusterException):
                client.nodes_manager.initialize()

    def memory_infos(self) -> list[dict[str, Any]]:
        with tls_explained(self.tls):
            client = self.client
            return [client.get_redis_connection(node).info("memory") for node in client.get_primaries()]

    def ping(self) -> None:
        with tls_explained(self.tls):
            for node in self.client.get_primaries():
                self.client.get_redis_connection(node).ping()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
