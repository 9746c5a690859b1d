"""Redis store: leases and due queues, every operation ONE Lua script
(``redis_<operation>.lua`` next to this file, read once at import and registered
once per store with ``register_script``). Times are the server's clock
(``TIME`` inside the scripts), kept in milliseconds and returned as epoch seconds.

Keys (the hash-tagged part keeps every key a script touches in one cluster slot):

- ``{prefix}:{lease:NAME}``: hash with owner, token, busy_until (ms), completed.
  Never expired or deleted, so the token strictly increases across grants.
- ``{prefix}:{q:QUEUE}:due``: sorted set scored by "claimable at" (ms): the due
  time while waiting, the lease expiry while held.
- ``{prefix}:{q:QUEUE}:items``: hash item_id -> cjson record (payload text, token,
  attempt, owner).
- ``{prefix}:{q:QUEUE}:inflight``: sorted set of held items scored by lease
  expiry, so depth() can tell scheduled items from in-flight ones.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from redis.commands.core import Script

from ..api import Claim, Lease, LeaseState, QueueDepth
from ..errors import ConfigError, LeaseLostError, StoreUnavailableError
from . import _common as common

DEFAULT_PREFIX = "onceonly"
# Seconds: long enough for a cold Lambda's first connect, short enough that an
# unreachable server fails the invocation well before its own timeout.
CONNECT_TIMEOUT = 3.0
SOCKET_TIMEOUT = 5.0

SCRIPT_NAMES = (
    "acquire", "renew", "release", "complete", "inspect",
    "put", "cancel", "claim", "ack_many", "retry", "depth",
)
SCRIPT_SOURCES: dict[str, str] = {
    name: Path(__file__).with_name(f"redis_{name}.lua").read_text(encoding="utf-8") for name in SCRIPT_NAMES
}


@contextmanager
def _translated(what: str) -> Iterator[None]:
    """Driver errors -> onceonly errors, with the cause kept."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise StoreUnavailableError(f"Redis store unreachable during {what}: {exc}") from exc
    except redis.RedisError as exc:
        raise StoreUnavailableError(f"Redis store error during {what}: {exc}") from exc


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


def _groups_of_four(flat: list[Any]) -> list[tuple[Any, Any, Any, Any]]:
    """The claim script returns its rows flat: item_id, payload, token, attempt, ..."""
    return [(flat[i], flat[i + 1], flat[i + 2], flat[i + 3]) for i in range(0, len(flat), 4)]


def _split_url(url: str) -> tuple[str, str]:
    """The URL without onceonly's own ``prefix`` option, and that prefix."""
    try:
        parts = urlsplit(url)
        options = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError as exc:
        raise ConfigError(f"malformed Redis URL: {exc}") from exc
    prefixes = [value for key, value in options if key == "prefix"]
    prefix = prefixes[-1] if prefixes else DEFAULT_PREFIX
    common.check_name(prefix, "prefix")
    driver_query = urlencode([(key, value) for key, value in options if key != "prefix"])
    return urlunsplit(parts._replace(query=driver_query)), prefix


class RedisStore:
    """Leases and queues on Redis (or Valkey). Pass your own ``redis.Redis`` client
    or build one with :meth:`from_url`. Keys are prefixed with ``prefix``."""

    kind = "redis"

    def __init__(
        self, client: redis.Redis, prefix: str = DEFAULT_PREFIX, *, owns_client: bool = False
    ) -> None:
        self._client = client
        self._prefix = common.check_name(prefix, "prefix")
        self._owns_client = owns_client
        # register_script only hashes the source; the script is loaded on first
        # use (EVALSHA, then SCRIPT LOAD if the server does not know it).
        self._scripts: dict[str, Script] = {
            name: client.register_script(source) for name, source in SCRIPT_SOURCES.items()
        }

    @classmethod
    def from_url(cls, url: str) -> RedisStore:
        """``redis://host:6379/0?prefix=myapp`` or ``rediss://…``. Redis-py's own
        URL options (e.g. ``socket_timeout``) pass through and win over the defaults."""
        driver_url, prefix = _split_url(url)
        try:
            client = redis.Redis.from_url(
                driver_url, socket_connect_timeout=CONNECT_TIMEOUT, socket_timeout=SOCKET_TIMEOUT
            )
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"malformed Redis URL: {exc}") from exc
        return cls(client, prefix, owns_client=True)

    def _run(self, what: str, keys: Sequence[str], args: Sequence[str | int] = ()) -> Any:
        with _translated(what):
            return self._scripts[what](keys=keys, args=args, client=self._client)

    def _lease_key(self, name: str) -> str:
        return f"{self._prefix}:{{lease:{name}}}"

    # -- setup ------------------------------------------------------------
    def setup(self) -> None:
        """Only checks that the server answers. Redis has nothing to create: keys
        appear on first write, and the scripts load themselves on first use."""
        with _translated("setup"):
            self._client.ping()

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    # -- leases -------------------------------------------------------------
    def acquire(self, name: str, ttl: float = 30.0) -> Lease | None:
        key = self._lease_key(common.check_name(name))
        ttl_ms = _milliseconds(common.check_seconds(ttl, "ttl"))
        owner = common.new_owner()
        granted = self._run("acquire", [key], [owner, ttl_ms])
        if granted is None:
            return None
        token, expires_ms = granted
        return Lease(name=name, owner=owner, token=int(token), expires_at=_seconds(expires_ms))

    def renew(self, lease: Lease, ttl: float = 30.0) -> Lease:
        ttl_ms = _milliseconds(common.check_seconds(ttl, "ttl"))
        expires_ms = self._run("renew", [self._lease_key(lease.name)], [lease.owner, lease.token, ttl_ms])
        if expires_ms is None:
            raise LeaseLostError(f"lease {lease.name!r} token {lease.token} is no longer held")
        return Lease(name=lease.name, owner=lease.owner, token=lease.token, expires_at=_seconds(expires_ms))

    def release(self, lease: Lease) -> bool:
        return bool(self._run("release", [self._lease_key(lease.name)], [lease.owner, lease.token]))

    def complete(self, lease: Lease, keep: float = 86400.0) -> bool:
        keep_ms = _milliseconds(common.check_seconds(keep, "keep"))
        return bool(self._run("complete", [self._lease_key(lease.name)], [lease.owner, lease.token, keep_ms]))

    def inspect(self, name: str) -> LeaseState | None:
        record = self._run("inspect", [self._lease_key(common.check_name(name))])
        if record is None:
            return None
        owner, token, busy_until_ms, completed = record
        return LeaseState(name=name, owner=_text(owner), token=int(token),
                          busy_until=_seconds(busy_until_ms), completed=bool(completed))

    def queue(self, name: str) -> RedisQueue:
        return RedisQueue(self, common.check_name(name, "queue name"))


class RedisQueue:
    """A due queue on three keys sharing one hash tag (see the module docstring)."""

    def __init__(self, store: RedisStore, name: str) -> None:
        self._store = store
        self.name = name
        tagged = f"{store._prefix}:{{q:{name}}}"
        self._due_key = f"{tagged}:due"
        self._items_key = f"{tagged}:items"
        self._inflight_key = f"{tagged}:inflight"

    def _run(self, what: str, args: Sequence[str | int] = ()) -> Any:
        return self._store._run(what, [self._due_key, self._items_key, self._inflight_key], args)

    def put(self, item_id: str, due_at: float | None = None, payload: Any = None) -> None:
        item_id = common.check_name(item_id, "item_id")
        due = common.check_due_at(due_at)
        payload_text = common.encode_payload(payload)
        self._run("put", [item_id, payload_text, "" if due is None else _epoch_ms(due)])

    def cancel(self, item_id: str) -> bool:
        return bool(self._run("cancel", [item_id]))

    def claim(self, limit: int = 25, lease: float = 60.0) -> list[Claim]:
        owner = common.new_owner()
        limit = common.check_limit(limit)
        lease_ms = _milliseconds(common.check_seconds(lease, "lease"))
        expires_ms, *rows = self._run("claim", [owner, limit, lease_ms])
        expires_at = _seconds(expires_ms)
        return [
            Claim(queue=self.name, item_id=str(_text(item_id)), payload=common.decode_payload(payload),
                  token=int(token), attempt=int(attempt), owner=owner, lease_expires_at=expires_at)
            for item_id, payload, token, attempt in _groups_of_four(rows)
        ]

    def ack(self, claim: Claim) -> bool:
        return self.ack_many([claim])[0]

    def ack_many(self, claims: Sequence[Claim]) -> list[bool]:
        if not claims:
            return []
        args = [field for c in claims for field in (c.item_id, c.token, c.owner)]
        return [bool(acked) for acked in self._run("ack_many", args)]

    def retry(self, claim: Claim, due_at: float) -> bool:
        due = common.check_due_at(due_at)
        if due is None:
            raise ConfigError("retry needs a due_at")
        return bool(self._run("retry", [claim.item_id, claim.token, claim.owner, _epoch_ms(due)]))

    def depth(self) -> QueueDepth:
        due, scheduled, in_flight = self._store._run("depth", [self._due_key, self._inflight_key])
        return QueueDepth(due=int(due), scheduled=int(scheduled), in_flight=int(in_flight))
