"""How onceonly's PostgreSQL connections behave, beyond the URL itself:

- every wait for the server's reply is bounded (:class:`BoundedConnection`,
  see :mod:`onceonly.stores.postgres.pool` for the bounds); the server's own bound
  (``statement_timeout``) is set per transaction (:func:`bound_this_transaction`)
  or per session, never as a startup parameter: PgBouncer and RDS Proxy refuse
  startup ``options``;
- behind a transaction pooler (``pool_mode=transaction``, implied by an RDS
  Proxy host) prepared statements are off (``prepare_threshold=None``): the
  next transaction may run on another server connection, where the statement
  does not exist or another client's has its name (``_pg3_0 already exists``);
  RDS Proxy pins a client that prepares to one server connection. The
  coordination store never prepares, whatever the URL says (see
  :func:`prepare_threshold_for`);
- a connection the server refuses for good (bad credentials, an unknown
  database, a refused startup parameter) fails the callers waiting for it at
  once, with the server's message (:class:`ConnectionRefusedByServer`);
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

from ..timeouts import DEFAULT_TIMEOUT

# name.proxy-abcdefghijkl.eu-west-1.rds.amazonaws.com (and the .cn partition)
_RDS_PROXY_HOST = re.compile(r"\.proxy-[a-z0-9]+\.[a-z0-9-]+\.rds\.amazonaws\.com(\.cn)?$", re.IGNORECASE)
# libpq reports these as text only (a failed connection carries no SQLSTATE).
_AUTH_FAILURE = re.compile(
    r"authentication failed|role \"[^\"]*\" does not exist|no password (was )?supplied|password is missing",
    re.IGNORECASE,
)
# Refusals that the same attempt would meet again: the server (or the pooler
# in front of it) answered, and said no. Not "starting up", "too many
# connections" or a network failure, which pass.
_PERMANENT_REFUSAL = re.compile(
    _AUTH_FAILURE.pattern
    + r"|database \"[^\"]*\" does not exist|no such database|no pg_hba\.conf entry"
    r"|unsupported startup parameter|command-line options|unrecognized configuration parameter"
    r"|invalid value for parameter|permission denied for database",
    re.IGNORECASE,
)
DEFAULT_PREPARE_THRESHOLD = 5  # psycopg's own default
# The server-side statement bound for the rest of one transaction: set_config
# with is_local, not SET LOCAL, which in a pipeline's implicit transaction
# raises "WARNING: SET LOCAL can only be used in transaction blocks", a line
# in the server's log per operation.
BOUND_THIS_TRANSACTION = "SELECT set_config('statement_timeout', %s, true)"
# The same bound for a whole session (the domain database, direct).
SET_SESSION_STATEMENT_TIMEOUT = "SET statement_timeout = {ms:d}"

_log = logging.getLogger("onceonly.postgres")

# psycopg's own interval between checks for Ctrl-C while waiting.
_WAIT_INTERVAL = 0.1


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose every wait for the server is bounded by
    ``reply_timeout``. On expiry the connection is closed (its state is unknown:
    a statement may or may not have run) and OperationalError is raised."""

    reply_timeout: float = DEFAULT_TIMEOUT / 2
    # The server's statement_timeout for each transaction (ms); None when the
    # URL sets its own.
    statement_timeout_ms: int | None = None

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


def prepare_threshold_for(transaction_pooled: bool, *, prepares: bool = True) -> int | None:
    """psycopg's ``prepare_threshold``: None (never prepare) behind a
    transaction pooler or when ``prepares`` is off, psycopg's default otherwise.

    The coordination store passes ``prepares=False``: a URL that omits
    ``pool_mode=transaction`` in front of a transaction pooler must not make
    it prepare. In pipeline mode psycopg records a statement's name before the
    server has answered its Parse, so after one failed Parse ("_pg3_0 already
    exists") the client executes whatever the shared server connection holds
    under that name: another client's statement, silently."""
    return None if transaction_pooled or not prepares else DEFAULT_PREPARE_THRESHOLD


def bound_this_transaction(conn: psycopg.Connection[Any]) -> None:
    """Queue the server's statement bound for the transaction ``conn`` is in
    (or, in a pipeline, the implicit one of the statements up to its sync).
    A connection of a pool you built yourself keeps your settings."""
    if isinstance(conn, BoundedConnection) and conn.statement_timeout_ms is not None:
        conn.execute(BOUND_THIS_TRANSACTION, (str(conn.statement_timeout_ms),), prepare=False)


def is_auth_failure(exc: BaseException) -> bool:
    return isinstance(exc, psycopg.OperationalError) and bool(_AUTH_FAILURE.search(str(exc)))


def is_permanent_refusal(exc: BaseException) -> bool:
    """True when connecting failed because the server refused the connection
    in a way that retrying will not change."""
    return isinstance(exc, psycopg.OperationalError) and bool(_PERMANENT_REFUSAL.search(str(exc)))


class ConnectionRefusedByServer(psycopg.OperationalError):
    """PostgreSQL (or a pooler or proxy in front of it) refused the connection
    for good; the message is the server's. Raised to every caller waiting for
    a connection of the pool, at once, instead of a pool timeout."""


class FailFastPool(ConnectionPool[Any]):
    """A pool whose callers learn of a permanent connection refusal at once.
    psycopg_pool connects in a background worker and lets a waiting caller
    time out ("couldn't get a connection after 5.00 sec"), logging the cause
    only as a warning; this one hands that cause to every waiting caller.

    A refusal stays a refusal until a connect succeeds: while the last
    connect was refused, a call that finds no idle connection raises the
    refusal at once and starts a background connect (one at a time: the
    pool's own), instead of waiting for one. A caller used to wait on the
    pool's backoff between background retries and get a pool timeout; and
    PgBouncer 1.18 holds a new client for its ``server_login_retry`` (15 s)
    after a refused login, so a connect of the caller's own would time out
    too. When a connect succeeds, its connection goes into the pool and the
    refused state ends: a fixed configuration is seen as soon as that
    background connect gets through."""

    _refusal: str | None = None  # the server's message while refused

    def getconn(self, timeout: float | None = None) -> Any:
        with self._lock:
            refusal = self._refusal
            if refusal is not None and not self._pool and self._nconns < self.max_size:
                self._maybe_grow_pool()  # no-op while a background connect is under way
            else:
                refusal = None
        if refusal is not None:
            raise ConnectionRefusedByServer(refusal)
        return super().getconn(timeout)

    def _connect(self, timeout: float | None = None) -> Any:
        try:
            conn = super()._connect(timeout)
        except psycopg.OperationalError as exc:
            if is_permanent_refusal(exc):
                message = (f"the server refused the connection (a retry will not help until the "
                           f"configuration changes): {str(exc).strip()}")
                self._refusal = message
                self._fail_waiting(message)
            raise
        self._refusal = None
        return conn

    def _fail_waiting(self, message: str) -> None:
        with self._lock:
            waiting = list(self._waiting)
            self._waiting.clear()
        for client in waiting:
            client.fail(ConnectionRefusedByServer(message))


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
