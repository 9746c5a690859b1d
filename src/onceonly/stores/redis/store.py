"""RedisStore: leases and counting semaphores (its queues are queue.py's),
every operation ONE Lua script (``lua/<operation>.lua``, read once at import
by scripts.py and loaded once per node on first use). Times are the server's
clock (``TIME`` inside the scripts), kept in milliseconds and returned as
epoch seconds.

Keys (the hash-tagged part keeps every key a script touches in one cluster slot):

- ``{prefix}:{lease:NAME}``: hash with owner, token, busy_until (ms), completed.
  Kept, so the token strictly increases across grants; only a record completed
  with ``expire=True`` (one cron tick) expires, when its keep ends.
- ``{prefix}:{sem:NAME}``: sorted set of a counting semaphore's holders,
  scored by their expiry (ms); it expires with its last holder.
- ``{prefix}:{q:QUEUE}:sched``: sorted set, one member per item, scored by its
  one "claimable at" time (ms): the due time while waiting, ``HELD`` (2^48 ms,
  past year 9999) + the lease expiry while held. So one set tells waiting from
  held items, and a claim or an ack writes it once per item.
- ``{prefix}:{q:QUEUE}:rec``: hash item_id -> ``"token attempt owner payload"``
  (owner empty when not held; the payload is the JSON text as put, never parsed
  by the scripts).

The queue scripts work on whole batches with one variadic command per step
(HMGET, HSET, ZADD, ZREM), and ``claim(acks=…)`` acks the previous batch in the
same script: a worker loop is one round trip per batch. The helpers the scripts
share are in ``lua/common.lua``, prepended to each.

Each script is sent exactly once per call: the store writes it on a connection
borrowed from the client's pool and reads the reply itself, around redis-py's
``execute_command`` and its retry policy (``Redis()`` retries a command on a
timeout, ten times in redis-py 8). A retried grant whose first reply was lost
would find its own grant and report contention, leaving the name held by
nobody until the ttl runs out. The client passed in is not changed, and its
other commands keep their retries.

Durable mode (``?wait_replicas=N&wait_timeout_ms=M``): every writing script is
followed on the same connection by ``WAIT N M``; when fewer than N replicas
acknowledged, the call raises StoreUnavailableError and its result (a grant, an
ack) is not handed out. See docs/coordination.md, "Failover".

A Redis Cluster (``?cluster=1``, or a ``RedisCluster`` client) is reached through
``cluster.py``: each call goes to the primary that owns its one slot, and
redirects are followed only where the reply proves nothing ran. Building the
client from a URL (cluster, TLS, database number rules) is ``endpoint.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster

from ...api import Lease, LeaseState, Permit
from ...errors import ConfigError, LeaseLostError, StoreUnavailableError
from .. import _common as common
from ..errors import translated
from ..timeouts import timeout_from
from .cluster import ClusterNodes
from .endpoint import nodes_from_url
from .errors import translate
from .nodes import Nodes, OneNode
from .options import (
    ALLOW_EVICTION_OPTION,
    CLUSTER_OPTION,
    DEFAULT_PREFIX,
    DEFAULT_WAIT_TIMEOUT_MS,
    flag,
    split_url,
    whole_number,
)
from .queue import RedisQueue
from .scripts import EVICTION_REFUSED, READ_ONLY_SCRIPTS, SCRIPT_NAMES, script_source, sha
from .units import milliseconds, seconds, text

# The only maxmemory-policy under which Redis never deletes a key to make room:
# under volatile-* a completed tick (its record has an expiry) goes first, under
# allkeys-* leases and queue items too. A full server then refuses writes
# instead (an OOM error reply: StoreUnavailableError), and nothing is forgotten.
SAFE_EVICTION_POLICY = "noeviction"


def _check_wait(socket_timeout: float | None, replicas: int, timeout_ms: int) -> tuple[int, int]:
    """(replicas, timeout ms) for WAIT in durable mode (0 replicas: off). The
    WAIT reply must come back before the client's socket timeout gives up on it."""
    if replicas < 0 or timeout_ms < 1:
        raise ConfigError(f"wait_replicas must be >= 0 and wait_timeout_ms >= 1, got {replicas}, {timeout_ms}")
    if replicas == 0:
        return replicas, timeout_ms
    if socket_timeout is not None and timeout_ms >= socket_timeout * 1000:
        raise ConfigError(
            f"redis option wait_timeout_ms ({timeout_ms}) must be shorter than the socket timeout"
            f" ({socket_timeout:g} s): raise timeout or lower wait_timeout_ms"
        )
    return replicas, timeout_ms


def _eviction_refused(seen: str) -> ConfigError:
    return ConfigError(
        f"the Redis server's maxmemory-policy {seen}: when memory fills, it may delete onceonly's keys"
        f" (a completed cron tick's record, then leases and queue items), and a finished tick runs again."
        f" Set maxmemory-policy {SAFE_EVICTION_POLICY} (on ElastiCache: in the cluster's parameter group),"
        f" or add {ALLOW_EVICTION_OPTION}=1 to the store URL to accept that risk (docs/coordination.md,"
        f" 'Redis: eviction and managed defaults')"
    )


class RedisStore:
    """Leases and queues on Redis (or Valkey). Pass your own ``redis.Redis`` client
    or build one with :meth:`from_url`. Keys are prefixed with ``prefix``.
    ``wait_replicas`` > 0 turns on durable mode (see the module docstring).

    Every script reads the server's ``maxmemory-policy`` (``INFO
    memory``, allowed where ``CONFIG`` is not, as on ElastiCache) before it
    writes, in the same atomic step, and the call raises ConfigError unless it
    is ``noeviction``: an evicting server forgets completed ticks, and under
    ``allkeys-*`` leases. A policy changed on a running server therefore stops
    the very next grant, claim or renewal. :meth:`setup` reads it too.
    ``allow_eviction=True`` (``?allow_eviction=1``) skips the check and accepts
    that risk."""

    kind = "redis"
    # Expiry is decided by the server's clock: no skew between clients to allow for.
    clock_skew = 0.0

    def __init__(
        self, client: redis.Redis | RedisCluster | Nodes, prefix: str = DEFAULT_PREFIX, *,
        owns_client: bool = False, wait_replicas: int = 0, wait_timeout_ms: int = DEFAULT_WAIT_TIMEOUT_MS,
        allow_eviction: bool = False,
    ) -> None:
        if isinstance(client, RedisCluster):
            timeout = client.nodes_manager.connection_kwargs.get("socket_timeout")
            self._nodes: Nodes = ClusterNodes(lambda: client, timeout, budget=2 * (timeout or 5.0))
        elif isinstance(client, (OneNode, ClusterNodes)):
            self._nodes = client
        else:  # a redis.Redis; anything else is refused there
            self._nodes = OneNode(client)  # type: ignore[arg-type]
        # the one node's client, for tools that look at its pool
        self._client: redis.Redis | None = self._nodes.client if isinstance(self._nodes, OneNode) else None
        self._prefix = common.check_name(prefix, "prefix")
        self._owns_client = owns_client
        # The policy is read inside every writing script (script_source); setup()
        # reads it too, to report a bad one before any call.
        self._allow_eviction = common.check_flag(allow_eviction, "allow_eviction")
        self._wait_replicas, self._wait_timeout_ms = _check_wait(
            self._nodes.socket_timeout, wait_replicas, wait_timeout_ms)
        # The sources as sent, and their hashes: a script is loaded on first use
        # (EVALSHA, then SCRIPT LOAD on the node that does not know it).
        self._sources = {name: script_source(name, guarded=not self._allow_eviction) for name in SCRIPT_NAMES}
        self._shas: dict[str, str] = {name: sha(source) for name, source in self._sources.items()}

    @classmethod
    def from_url(cls, url: str) -> RedisStore:
        """``redis://host:6379/0?prefix=myapp&timeout=10`` or ``rediss://…``; add
        ``wait_replicas=1&wait_timeout_ms=500`` for durable mode, and
        ``allow_eviction=1`` to run on a server whose maxmemory-policy may evict
        keys (see the class docstring). ``timeout``
        (seconds) bounds every operation: half for connecting, half for the
        reply. The redis-py options that :mod:`.options` lists (e.g.
        ``socket_timeout``) pass through and win over those defaults; any other
        option is a ConfigError."""
        driver_url, options = split_url(url)
        prefix = options.get("prefix", DEFAULT_PREFIX)
        common.check_name(prefix, "prefix")
        half = timeout_from(options) / 2
        wait_replicas = whole_number(options, "wait_replicas", 0, 0)
        wait_timeout_ms = whole_number(options, "wait_timeout_ms", DEFAULT_WAIT_TIMEOUT_MS, 1)
        allow_eviction = flag(options, ALLOW_EVICTION_OPTION)
        nodes = nodes_from_url(driver_url, cluster=flag(options, CLUSTER_OPTION), half_timeout=half)
        return cls(nodes, prefix, owns_client=True, wait_replicas=wait_replicas,
                   wait_timeout_ms=wait_timeout_ms, allow_eviction=allow_eviction)

    def _check_eviction(self) -> None:
        """Refuse a server that may evict keys (ConfigError), before any work."""
        with translated(translate, "the maxmemory-policy check"):
            try:
                policies = [text(info.get("maxmemory_policy")) for info in self._nodes.memory_infos()]
            except redis.ResponseError as exc:  # INFO renamed or disabled: nothing else tells
                raise _eviction_refused(f"could not be read ({exc})") from exc
        for policy in policies:  # on a cluster, every primary's
            if policy != SAFE_EVICTION_POLICY:
                raise _eviction_refused(f"is {policy!r}" if policy else "is not in INFO memory")

    def _run(self, what: str, keys: Sequence[str], args: Sequence[str | int] = ()) -> Any:
        evalsha = ("EVALSHA", self._shas[what], len(keys), *keys, *args)
        durable = self._wait_replicas > 0 and what not in READ_ONLY_SCRIPTS
        commands = [evalsha, ("WAIT", self._wait_replicas, self._wait_timeout_ms)] if durable else [evalsha]
        with translated(translate, what):
            # Sent once; sent again only where the reply proves it did not run
            # (NOSCRIPT; on a cluster, redirects): see nodes.py.
            replies = self._nodes.run(keys[0], commands, self._sources[what])
            result = replies[0]
            if isinstance(result, redis.ResponseError) and str(result).startswith(EVICTION_REFUSED):
                policy = str(result)[len(EVICTION_REFUSED):]
                raise _eviction_refused("could not be read (INFO did not answer)" if policy == "?"
                                        else f"is {policy!r}") from result
            if isinstance(result, Exception):
                raise result
            if durable:
                self._check_replicas(what, replies[1])
            return result

    def _check_replicas(self, what: str, acked: Any) -> None:
        if isinstance(acked, Exception):
            raise acked
        if int(acked) < self._wait_replicas:
            raise StoreUnavailableError(
                f"Redis store: {what} was acknowledged by {int(acked)} of {self._wait_replicas} replicas"
                f" within {self._wait_timeout_ms} ms; its result is not handed out (durable mode)"
            )

    def _lease_key(self, name: str) -> str:
        return f"{self._prefix}:{{lease:{name}}}"

    def _semaphore_key(self, name: str) -> str:
        return f"{self._prefix}:{{sem:{name}}}"

    # -- setup ------------------------------------------------------------
    def setup(self) -> None:
        """Checks that the server answers and that its maxmemory-policy cannot
        evict keys (ConfigError otherwise, unless ``allow_eviction``). Redis has
        nothing to create: keys appear on first write, and the scripts load
        themselves on first use."""
        if not self._allow_eviction:
            self._check_eviction()  # a round trip too: the server answers
            return
        with translated(translate, "setup"):
            self._nodes.ping()

    def close(self) -> None:
        if self._owns_client:
            self._nodes.close()

    # -- leases -------------------------------------------------------------
    def acquire(self, name: str, ttl: float = 30.0) -> Lease | None:
        key = self._lease_key(common.check_name(name))
        ttl_ms = milliseconds(common.check_seconds(ttl, "ttl"))
        owner = common.new_owner()
        granted = self._run("acquire", [key], [owner, ttl_ms])
        if granted is None:
            return None
        token, expires_ms, grants = granted
        return Lease(name=name, owner=owner, token=int(token), expires_at=seconds(expires_ms), grants=int(grants))

    def renew(self, lease: Lease, ttl: float = 30.0) -> Lease:
        lease = common.check_lease(lease)
        ttl_ms = milliseconds(common.check_seconds(ttl, "ttl"))
        expires_ms = self._run("renew", [self._lease_key(lease.name)], [lease.owner, lease.token, ttl_ms])
        if expires_ms is None:
            raise LeaseLostError(f"lease {lease.name!r} token {lease.token} is no longer held")
        return Lease(name=lease.name, owner=lease.owner, token=lease.token, expires_at=seconds(expires_ms),
                     grants=lease.grants)

    def release(self, lease: Lease) -> bool:
        lease = common.check_lease(lease)
        return bool(self._run("release", [self._lease_key(lease.name)], [lease.owner, lease.token]))

    def complete(self, lease: Lease, keep: float = 86400.0, *, expire: bool = False) -> bool:
        lease = common.check_lease(lease)
        keep_ms = milliseconds(common.check_seconds(keep, "keep"))
        flag = 1 if common.check_flag(expire, "expire") else 0
        return bool(self._run("complete", [self._lease_key(lease.name)], [lease.owner, lease.token, keep_ms, flag]))

    def inspect(self, name: str) -> LeaseState | None:
        record = self._run("inspect", [self._lease_key(common.check_name(name))])
        if record is None:
            return None
        owner, token, busy_until_ms, completed, grants = record
        return LeaseState(name=name, owner=text(owner), token=int(token),
                          busy_until=seconds(busy_until_ms), completed=bool(completed), grants=int(grants))

    # -- counting semaphores -------------------------------------------------
    def take_permit(self, name: str, limit: int, ttl: float = 30.0) -> Permit | None:
        key = self._semaphore_key(common.check_name(name))
        limit = common.check_permit_limit(limit)
        ttl_ms = milliseconds(common.check_seconds(ttl, "ttl"))
        holder = common.new_owner()
        expires_ms = self._run("take_permit", [key], [holder, limit, ttl_ms])
        return None if expires_ms is None else Permit(name=name, holder=holder, expires_at=seconds(expires_ms))

    def take_permits(self, wants: Sequence[tuple[str, int]], ttl: float = 30.0) -> list[Permit | None]:
        """One script call per permit: each semaphore may live on another cluster node."""
        return [self.take_permit(name, limit, ttl) for name, limit in common.check_wants(wants)]

    def return_permits(self, permits: Sequence[Permit]) -> list[bool]:
        """One script call per permit: each semaphore may live on another cluster node."""
        return [self.return_permit(permit) for permit in common.check_permits(permits)]

    def return_permit(self, permit: Permit) -> bool:
        permit = common.check_permit(permit)
        return bool(self._run("return_permit", [self._semaphore_key(permit.name)], [permit.holder]))

    def queue(self, name: str) -> RedisQueue:
        return RedisQueue(self._prefix, self._run, common.check_name(name, "queue name"))
