"""How onceonly's PostgreSQL connections behave, beyond the URL itself:

- every wait for the server's reply is bounded (:class:`BoundedConnection`,
  see :mod:`onceonly.stores.pgpool` for the bounds);
- behind RDS Proxy, prepared statements are off (``prepare_threshold=None``):
  the proxy pins a client to one server connection for the rest of its session
  once it sees one, which defeats the proxy's multiplexing;
- after an authentication failure (a password rotated in Secrets Manager while
  the container kept the old one), the URL is read again once and the
  connection retried once with it.
"""

from __future__ import annotations

import logging
import re
import selectors
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.abc import PQGen
from psycopg_pool import ConnectionPool

from .timeouts import DEFAULT_TIMEOUT

# name.proxy-abcdefghijkl.eu-west-1.rds.amazonaws.com (and the .cn partition)
_RDS_PROXY_HOST = re.compile(r"\.proxy-[a-z0-9]+\.[a-z0-9-]+\.rds\.amazonaws\.com(\.cn)?$", re.IGNORECASE)
# libpq reports these as text only (a failed connection carries no SQLSTATE).
_AUTH_FAILURE = re.compile(
    r"authentication failed|role \"[^\"]*\" does not exist|no password (was )?supplied|password is missing",
    re.IGNORECASE,
)
DEFAULT_PREPARE_THRESHOLD = 5  # psycopg's own default

_log = logging.getLogger("onceonly.postgres")

# psycopg's own interval between checks for Ctrl-C while waiting.
_WAIT_INTERVAL = 0.1


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose every wait for the server is bounded by
    ``reply_timeout``. On expiry the connection is closed (its state is unknown:
    a statement may or may not have run) and OperationalError is raised."""

    reply_timeout: float = DEFAULT_TIMEOUT / 2

    def wait(self, gen: PQGen[Any], interval: float = _WAIT_INTERVAL, timeout: float | None = None) -> Any:
        bound = self.reply_timeout if timeout is None else timeout
        try:
            return super().wait(gen, interval, bound)
        except pg_errors._WaitTimeout as exc:
            self.pgconn.finish()  # as psycopg does when a cancelled query never ends
            raise psycopg.OperationalError(
                f"no reply from the PostgreSQL server within {bound:g} s; connection closed"
            ) from exc


def check_on_checkout(conn: psycopg.Connection[Any]) -> None:
    """The pool's check of a connection it hands out, without a round trip while
    the link is quiet. An idle connection receives nothing unless the server
    closed it (a restart, a failover, idle_session_timeout, pg_terminate_backend
    send an error, then close the socket) or sent a notification: only then is
    the empty query sent, which raises for a closed connection, and the pool
    replaces it. A link that died without a word is the keepalives' and the
    reply bound's to catch. Pinging on every checkout doubled the round trips
    of every store operation."""
    if conn.closed or conn.broken or _has_input(conn.fileno()):
        ConnectionPool.check_connection(conn)


def _has_input(fd: int) -> bool:
    # selectors, not select.select: that one fails for descriptors >= 1024.
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        return bool(selector.select(timeout=0))


def is_rds_proxy_host(conninfo: str) -> bool:
    """True when every host of ``conninfo`` is an RDS Proxy endpoint."""
    hosts = [h for h in str(psycopg.conninfo.conninfo_to_dict(conninfo).get("host") or "").split(",") if h]
    return bool(hosts) and all(_RDS_PROXY_HOST.search(h.strip()) for h in hosts)


def prepare_threshold_for(conninfo: str) -> int | None:
    """psycopg's ``prepare_threshold`` for this server: None (never prepare)
    behind RDS Proxy, psycopg's default otherwise."""
    return None if is_rds_proxy_host(conninfo) else DEFAULT_PREPARE_THRESHOLD


def is_auth_failure(exc: BaseException) -> bool:
    return isinstance(exc, psycopg.OperationalError) and bool(_AUTH_FAILURE.search(str(exc)))


class RefreshingConninfo:
    """A pool's ``conninfo`` (a callable: psycopg_pool resolves it for each new
    connection) that is replaced by ``refresh()`` after an authentication
    failure. Use :attr:`connection_class` as the pool's connection class."""

    def __init__(self, conninfo: str, refresh: Callable[[], str]) -> None:
        self._current = conninfo
        self._refresh = refresh
        self._lock = threading.Lock()
        self.connection_class = self._make_connection_class()

    def __call__(self) -> str:
        return self._current

    def refreshed(self, failed: str) -> str:
        """The URL to retry with after ``failed`` was refused. Reads the secret
        again unless another connection already did since ``failed`` was used."""
        with self._lock:
            if self._current == failed:
                self._current = self._refresh()
            return self._current

    def _make_connection_class(self) -> type[BoundedConnection]:
        source = self

        class SecretRefreshingConnection(BoundedConnection):
            @classmethod
            def connect(cls, conninfo: str = "", **kwargs: Any) -> Any:
                try:
                    return super().connect(conninfo, **kwargs)
                except psycopg.OperationalError as exc:
                    if not is_auth_failure(exc):
                        raise
                    fresh = source.refreshed(conninfo)
                    if fresh == conninfo:
                        raise  # the secret did not change: a real misconfiguration
                    _log.warning("PostgreSQL refused the credentials; reconnecting once with the re-read secret")
                    return super().connect(fresh, **kwargs)

        return SecretRefreshingConnection
