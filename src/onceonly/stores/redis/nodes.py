"""How the Redis store reaches its server: one node (``redis.Redis``) here, a
cluster in ``cluster.py``. Both send each script call exactly once (see
``send_once``) and resend only when the server's reply proves the script did
not run (NOSCRIPT, and on a cluster MOVED, ASK, TRYAGAIN, CLUSTERDOWN)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import redis
from redis.exceptions import NoScriptError

from ...errors import ConfigError


class Nodes(Protocol):
    """What the store needs from its connection to Redis."""

    socket_timeout: float | None

    def run(self, key: str, commands: Sequence[tuple[Any, ...]], source: str) -> list[Any]:
        """Send ``commands`` (a script call on ``key``, maybe then WAIT) to the
        node that holds ``key``, once; one reply each (error replies as exceptions)."""

    def memory_infos(self) -> list[dict[str, Any]]:
        """``INFO memory`` of every primary the store's keys may live on."""

    def ping(self) -> None: ...

    def close(self) -> None: ...


def borrow(pool: redis.ConnectionPool) -> Any:
    """A connected connection from ``pool``: a failure here sent nothing."""
    return pool.get_connection()


def exchange(pool: redis.ConnectionPool, conn: Any, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
    """Send ``commands`` on ``conn`` (borrowed from ``pool``) and read one reply
    each (an error reply comes back as its exception). Never resends: this
    bypasses redis-py's retry policy on purpose (``Redis()`` retries a command
    on a timeout, and a retried grant whose first reply was lost would find its
    own grant). A connection that failed mid-way is closed, not reused."""
    try:
        conn.send_packed_command(conn.pack_commands(commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(conn.read_response())
            except redis.ResponseError as exc:
                replies.append(exc)
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)
    return replies


def send_once(pool: redis.ConnectionPool, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
    return exchange(pool, borrow(pool), commands)


@contextmanager
def tls_explained(tls: bool) -> Iterator[None]:
    """A TLS/plain mismatch keeps its error but says which scheme to try. A
    server certificate that does not verify passes unchanged: errors.translate
    makes it a ConfigError (no retry helps)."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        text = str(exc)
        if certificate_refused(text):
            raise
        hint = ("; if the port does not speak TLS, use redis://" if tls else
                "; if the port speaks TLS, use rediss://")
        raise type(exc)(text + hint) from exc


def certificate_refused(text: str) -> bool:
    """Whether a connection error's text says the server's certificate did not verify."""
    return "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text


def not_a_cluster_url(exc: Exception) -> ConfigError:
    return ConfigError(
        f"the Redis server is a cluster node ({exc}): add cluster=1 to the store URL"
        " (rediss://HOST:PORT?cluster=1), so that each key's script goes to the node that holds it"
    )


class OneNode:
    """One Redis server (or a primary behind one endpoint) through a ``redis.Redis``
    client's pool. The client is not changed; its own commands keep their retries."""

    def __init__(self, client: redis.Redis) -> None:
        if not isinstance(getattr(client, "connection_pool", None), redis.ConnectionPool):
            raise ConfigError(f"RedisStore needs a redis.Redis client with a connection pool, got {client!r}")
        self.client = client
        self.socket_timeout = client.connection_pool.connection_kwargs.get("socket_timeout")
        self.tls = issubclass(client.connection_pool.connection_class, redis.SSLConnection)

    def _refuse_a_cluster_node(self) -> None:
        """On setup: a cluster node behind a plain URL runs the scripts of the
        keys it holds and answers MOVED for the others (a ConfigError in run()),
        until a slot moves. Not on every cold start: a round trip each."""
        try:
            enabled = str(self.client.info("cluster").get("cluster_enabled", "0"))
        except redis.ResponseError:  # INFO restricted: MOVED replies still tell
            enabled = "0"
        if enabled == "1":
            raise not_a_cluster_url(ConfigError("INFO cluster says cluster_enabled:1"))

    def run(self, key: str, commands: Sequence[tuple[Any, ...]], source: str) -> list[Any]:
        with tls_explained(self.tls):
            return self._run(commands, source)

    def _run(self, commands: Sequence[tuple[Any, ...]], source: str) -> list[Any]:
        replies = send_once(self.client.connection_pool, commands)
        if isinstance(replies[0], NoScriptError):
            # The server does not know the script, so it did not run: load it
            # (idempotent) and send the call again, once.
            self.client.script_load(source)
            replies = send_once(self.client.connection_pool, commands)
        if isinstance(replies[0], redis.exceptions.AskError):  # MOVED too: the script did not run
            raise not_a_cluster_url(ConfigError(f"it answered MOVED {replies[0]}"))
        return replies

    def memory_infos(self) -> list[dict[str, Any]]:
        with tls_explained(self.tls):
            self._refuse_a_cluster_node()
            return [self.client.info("memory")]

    def ping(self) -> None:
        with tls_explained(self.tls):
            self._refuse_a_cluster_node()

    def close(self) -> None:
        self.client.close()
