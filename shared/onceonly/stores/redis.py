"""Redis store: leases and due queues, every operation ONE Lua script
(``redis_<operation>.lua`` next to this file, read once at import and registered
once per store with ``register_script``). Times are the server's clock
(``TIME`` inside the scripts), kept in milliseconds and returned as epoch seconds.

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
share are in ``redis_common.lua``, prepended to each.

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
``redis_cluster.py``: each call goes to the primary that owns its one slot, and
redirects are followed only where the reply proves nothing ran. Building the
client from a URL (cluster, TLS, database number rules) is ``redis_endpoint.py``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster

from ..api import Claim, ClaimBatch, Lease, LeaseState, Permit, QueueDepth
from ..errors import ConfigError, LeaseLostError, StoreUnavailableError
from . import _common as common
from .redis_cluster import ClusterNodes
from .redis_endpoint import CLUSTER_OPTION, nodes_from_url
from .redis_nodes import Nodes, OneNode
from .redis_url import split_url
from .timeouts import TIMEOUT_OPTION, timeout_from

DEFAULT_PREFIX = "onceonly"
DEFAULT_WAIT_TIMEOUT_MS = 1000
ALLOW_EVICTION_OPTION = "allow_eviction"
# URL options onceonly reads itself; the rest go to redis-py.
STORE_OPTIONS = ("prefix", TIMEOUT_OPTION, "wait_replicas", "wait_timeout_ms", ALLOW_EVICTION_OPTION, CLUSTER_OPTION)
# The only maxmemory-policy under which Redis never deletes a key to make room:
# under volatile-* a completed tick (its record has an expiry) goes first, under
# allkeys-* leases and queue items too. A full server then refuses writes
# instead (an OOM error reply: StoreUnavailableError), and nothing is forgotten.
SAFE_EVICTION_POLICY = "noeviction"
_BOOLEANS = {"1": True, "true": True, "0": False, "false": False}
# Scripts that only read: no WAIT after them in durable mode.
READ_ONLY_SCRIPTS = frozenset({"inspect", "depth"})

SCRIPT_NAMES = (
    "acquire", "renew", "release", "complete", "inspect",
    "put", "cancel", "claim", "retry", "depth", "put_if_absent",
    "take_permit", "return_permit",
)


def script_file(name: str) -> str:
    return Path(__file__).with_name(f"redis_{name}.lua").read_text(encoding="utf-8")


# Each script as registered: the shared helpers, then the script's own file.
SCRIPT_SOURCES: dict[str, str] = {name: script_file("common") + script_file(name) for name in SCRIPT_NAMES}
# Put before each script unless eviction is allowed: the policy is read in
# the same atomic step as every write (redis_eviction_guard.lua).
EVICTION_GUARD = script_file("eviction_guard")
EVICTION_REFUSED = "ONCEONLY_EVICTION "


def script_source(name: str, *, guarded: bool) -> str:
    """The source registered for script ``name``: with the eviction guard in
    front for a store that does not allow eviction."""
    return (EVICTION_GUARD if guarded else "") + SCRIPT_SOURCES[name]


def _sha(source: str) -> str:
    """The SHA1 that EVALSHA names a script by (what register_script computes)."""
    return hashlib.sha1(source.encode("utf-8")).hexdigest()


@contextmanager
def _translated(what: str) -> Iterator[None]:
    """Driver errors -> onceonly errors, with the cause kept."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise StoreUnavailableError(f"Redis store unreachable during {what}: {exc}") from exc
    except redis.RedisError as exc:
        raise StoreUnavailableError(f"Redis store error during {what}: {exc}") from exc


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


def _milliseconds(seconds: float) -> int:
    """Durations travel as whole milliseconds, rounded up so a tiny positive ttl
    never becomes 0 (which would grant an already-expired lease)."""
    return max(1, math.ceil(seconds * 1000))


def _epoch_ms(seconds: float) -> int:
    return math.floor(seconds * 1000)


def _seconds(milliseconds: int | bytes | str) -> float:
    return int(milliseconds) / 1000.0


def _text(value: bytes | str | None) -> str | None:
    """Replies are bytes unless the injected client decodes responses."""
    return value.decode() if isinstance(value, bytes) else value


def _split_url(url: str) -> tuple[str, dict[str, str]]:
    """The URL without onceonly's own options, and those options (last one
    wins); every other option is checked against redis_url's table."""
    return split_url(url, STORE_OPTIONS)


def _flag(options: Mapping[str, str], name: str) -> bool:
    raw = options.get(name)
    if raw is None:
        return False
    value = _BOOLEANS.get(raw.strip().lower())
    if value is None:
        raise ConfigError(f"redis option {name} must be 1, true, 0 or false, got {raw!r}")
    return value


def _eviction_refused(seen: str) -> ConfigError:
    return ConfigError(
        f"the Redis server's maxmemory-policy {seen}: when memory fills, it may delete onceonly's keys"
        f" (a completed cron tick's record, then leases and queue items), and a finished tick runs again."
        f" Set maxmemory-policy {SAFE_EVICTION_POLICY} (on ElastiCache: in the cluster's parameter group),"
        f" or add {ALLOW_EVICTION_OPTION}=1 to the store URL to accept that risk (docs/coordination.md,"
        f" 'Redis: eviction and managed defaults')"
    )


def _whole_number(options: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise ConfigError(f"redis option {name} must be a whole number >= {minimum}, got {raw!r}")
    return value


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
        self._shas: dict[str, str] = {name: _sha(source) for name, source in self._sources.items()}

    @classmethod
    def from_url(cls, url: str) -> RedisStore:
        """``redis://host:6379/0?prefix=myapp&timeout=10`` or ``rediss://…``; add
        ``wait_replicas=1&wait_timeout_ms=500`` for durable mode, and
        ``allow_eviction=1`` to run on a server whose maxmemory-policy may evict
        keys (see the class docstring). ``timeout``
        (seconds) bounds every operation: half for connecting, half for the
        reply. The redis-py options that :mod:`.redis_url` lists (e.g.
        ``socket_timeout``) pass through and win over those defaults; any other
        option is a ConfigError."""
        driver_url, options = _split_url(url)
        prefix = options.get("prefix", DEFAULT_PREFIX)
        common.check_name(prefix, "prefix")
        half = timeout_from(options) / 2
        wait_replicas = _whole_number(options, "wait_replicas", 0, 0)
        wait_timeout_ms = _whole_number(options, "wait_timeout_ms", DEFAULT_WAIT_TIMEOUT_MS, 1)
        allow_eviction = _flag(options, ALLOW_EVICTION_OPTION)
        nodes = nodes_from_url(driver_url, cluster=_flag(options, CLUSTER_OPTION), half_timeout=half)
        return cls(nodes, prefix, owns_client=True, wait_replicas=wait_replicas,
                   wait_timeout_ms=wait_timeout_ms, allow_eviction=allow_eviction)

    def _check_eviction(self) -> None:
        """Refuse a server that may evict keys (ConfigError), before any work."""
        with _translated("the maxmemory-policy check"):
            try:
                policies = [_text(info.get("maxmemory_policy")) for info in self._nodes.memory_infos()]
            except redis.ResponseError as exc:  # INFO renamed or disabled: nothing else tells
                raise _eviction_refused(f"could not be read ({exc})") from exc
        for policy in policies:  # on a cluster, every primary's
            if policy != SAFE_EVICTION_POLICY:
                raise _eviction_refused(f"is {policy!r}" if policy else "is not in INFO memory")

    def _run(self, what: str, keys: Sequence[str], args: Sequence[str | int] = ()) -> Any:
        evalsha = ("EVALSHA", self._shas[what], len(keys), *keys, *args)
        durable = self._wait_replicas > 0 and what not in READ_ONLY_SCRIPTS
        commands = [evalsha, ("WAIT", self._wait_replicas, self._wait_timeout_ms)] if durable else [evalsha]
        with _translated(what):
            # Sent once; sent again only where the reply proves it did not run
            # (NOSCRIPT; on a cluster, redirects): see redis_nodes.py.
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
        with _translated("setup"):
            self._nodes.ping()

    def close(self) -> None:
        if self._owns_client:
            self._nodes.close()

    # -- leases -------------------------------------------------------------
    def acquire(self, name: str, ttl: float = 30.0) -> Lease | None:
        key = self._lease_key(common.check_name(name))
        ttl_ms = _milliseconds(common.check_seconds(ttl, "ttl"))
        owner = common.new_owner()
        granted = self._run("acquire", [key], [owner, ttl_ms])
        if granted is None:
            return None
        token, expires_ms, grants = granted
        return Lease(name=name, owner=owner, token=int(token), expires_at=_seconds(expires_ms), grants=int(grants))

    def renew(self, lease: Lease, ttl: float = 30.0) -> Lease:
        lease = common.check_lease(lease)
        ttl_ms = _milliseconds(common.check_seconds(ttl, "ttl"))
        expires_ms = self._run("renew", [self._lease_key(lease.name)], [lease.owner, lease.token, ttl_ms])
        if expires_ms is None:
            raise LeaseLostError(f"lease {lease.name!r} token {lease.token} is no longer held")
        return Lease(name=lease.name, owner=lease.owner, token=lease.token, expires_at=_seconds(expires_ms),
                     grants=lease.grants)

    def release(self, lease: Lease) -> bool:
        lease = common.check_lease(lease)
        return bool(self._run("release", [self._lease_key(lease.name)], [lease.owner, lease.token]))

    def complete(self, lease: Lease, keep: float = 86400.0, *, expire: bool = False) -> bool:
        lease = common.check_lease(lease)
        keep_ms = _milliseconds(common.check_seconds(keep, "keep"))
        flag = 1 if common.check_flag(expire, "expire") else 0
        return bool(self._run("complete", [self._lease_key(lease.name)], [lease.owner, lease.token, keep_ms, flag]))

    def inspect(self, name: str) -> LeaseState | None:
        record = self._run("inspect", [self._lease_key(common.check_name(name))])
        if record is None:
            return None
        owner, token, busy_until_ms, completed, grants = record
        return LeaseState(name=name, owner=_text(owner), token=int(token),
                          busy_until=_seconds(busy_until_ms), completed=bool(completed), grants=int(grants))

    # -- counting semaphores -------------------------------------------------
    def take_permit(self, name: str, limit: int, ttl: float = 30.0) -> Permit | None:
        key = self._semaphore_key(common.check_name(name))
        limit = common.check_permit_limit(limit)
        ttl_ms = _milliseconds(common.check_seconds(ttl, "ttl"))
        holder = common.new_owner()
        expires_ms = self._run("take_permit", [key], [holder, limit, ttl_ms])
        return None if expires_ms is None else Permit(name=name, holder=holder, expires_at=_seconds(expires_ms))

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
        return RedisQueue(self, common.check_name(name, "queue name"))


class RedisQueue:
    """A due queue on two keys sharing one hash tag (see the module docstring)."""

    def __init__(self, store: RedisStore, name: str) -> None:
        self._store = store
        self.name = name
        tagged = f"{store._prefix}:{{q:{name}}}"
        self._keys = [f"{tagged}:sched", f"{tagged}:rec"]

    def _run(self, what: str, args: Sequence[str | int] = ()) -> Any:
        return self._store._run(what, self._keys, args)

    def put(self, item_id: str, due_at: float | None = None, payload: Any = None) -> None:
        self._put([common.check_put(item_id, due_at, payload)])

    def put_many(self, items: Iterable[tuple[str, float | None, Any]]) -> int:
        """One script call for the whole batch (see ``redis_put.lua``)."""
        return self._put(common.check_put_items(items))

    def _put(self, puts: Sequence[common.CheckedPut]) -> int:
        if not puts:
            return 0
        args = [field for put in puts
                for field in (put.item_id, put.payload, "" if put.due_at is None else _epoch_ms(put.due_at))]
        return int(self._run("put", args))

    def put_if_absent(self, items: Iterable[tuple[str, float | None, Any]]) -> list[bool]:
        """One script call for the whole batch (see ``redis_put_if_absent.lua``)."""
        checked = common.check_put_items(items)
        puts, kept = common.first_put_per_item(checked)
        if not puts:
            return []
        args = [field for put in puts
                for field in (put.item_id, put.payload, "" if put.due_at is None else _epoch_ms(put.due_at))]
        done = {put.item_id for put, put_now in zip(puts, self._run("put_if_absent", args), strict=True) if put_now}
        return common.absent_results(len(checked), puts, kept, done)

    def cancel(self, item_id: str) -> bool:
        return self.cancel_many([item_id])[0]

    def cancel_many(self, item_ids: Sequence[str]) -> list[bool]:
        """One script call for the whole batch (see ``redis_cancel.lua``)."""
        ids = [common.check_name(item_id, "item_id") for item_id in item_ids]
        return [bool(removed) for removed in self._run("cancel", ids)] if ids else []

    def claim(self, limit: int = 25, lease: float = 60.0, *, acks: Sequence[Claim] = ()) -> ClaimBatch:
        acks = common.check_claims(acks, self.name)
        limit = common.check_limit(limit)
        lease_ms = _milliseconds(common.check_seconds(lease, "lease"))
        owner = common.new_owner()
        expires_ms, acked, rows = self._claim_script(owner, limit, lease_ms, acks)
        expires_at = _seconds(expires_ms)
        claims = []
        for i in range(0, len(rows), 2):
            # the item's new record: "token attempt owner payload"
            token, attempt, _, payload = str(_text(rows[i + 1])).split(" ", 3)
            claims.append(Claim(queue=self.name, item_id=str(_text(rows[i])), payload=common.decode_payload(payload),
                                token=int(token), attempt=int(attempt), owner=owner, lease_expires_at=expires_at))
        return ClaimBatch(claims, acked)

    def ack(self, claim: Claim) -> bool:
        return self.ack_many([claim])[0]

    def ack_many(self, claims: Sequence[Claim]) -> list[bool]:
        claims = common.check_claims(claims, self.name)
        if not claims:
            return []
        # The claim script with limit 0: its ack half only (owner and lease unused).
        return self._claim_script("-", 0, 1, claims)[1]

    def _claim_script(
        self, owner: str, limit: int, lease_ms: int, acks: Sequence[Claim]
    ) -> tuple[int, list[bool], list[Any]]:
        """Run redis_claim.lua: (lease expiry ms, ack results, claimed items as id, record, id, …)."""
        args: list[str | int] = [owner, limit, lease_ms]
        args.extend(field for c in acks for field in (c.item_id, c.token, c.owner))
        expires_ms, count, *rest = self._run("claim", args)
        return int(expires_ms), [bool(a) for a in rest[:count]], rest[count:]

    def retry(self, claim: Claim, due_at: float) -> bool:
        claim, due = common.check_claim(claim, self.name), common.check_retry_due_at(due_at)
        return bool(self._run("retry", [claim.item_id, claim.token, claim.owner, _epoch_ms(due)]))

    def depth(self) -> QueueDepth:
        due, scheduled, in_flight = self._store._run("depth", self._keys[:1])
        return QueueDepth(due=int(due), scheduled=int(scheduled), in_flight=int(in_flight))
