"""psycopg pools that never hang: every step of getting a connection and every
wait for a reply has a bound, so a PostgreSQL that stops answering (a dead
primary, a NAT that forgot the flow, a proxy that accepts bytes and never
answers) fails the call within the URL's ``timeout`` instead of blocking a
Lambda until its own timeout. Used by the coordination store and by the
reference app's domain database.

Given ``timeout`` T (seconds, ``?timeout=`` in the URL, default 10):

- getting a connection (waiting for a free one, connecting, the check on
  checkout) takes at most T/2: the pool's ``timeout``; ``connect_timeout`` is
  T/2 as well (libpq rounds it to whole seconds, at least 2);
- each wait for the server's reply takes at most T/2: on the client
  (:class:`BoundedConnection`; TCP timeouts cannot see a peer that acknowledges
  bytes and never answers) and on the server (``statement_timeout``, set by
  ``set_config(…, true)`` in each store statement's transaction, or once per session for
  the domain database; never as a startup parameter, which PgBouncer and RDS
  Proxy refuse);
- TCP keepalives and ``tcp_user_timeout`` make the kernel drop a link whose
  packets vanish, so a dead idle connection is noticed before it is used;
- the pool checks each connection on checkout, so one closed by the server
  while idle in the pool is replaced instead of failing a call; the check
  costs a round trip only when the server sent something on the idle link
  (see :func:`~onceonly.stores.postgres.connection.check_on_checkout`);
- a failed background connect is not retried with a growing backoff (psycopg_pool's
  default keeps trying for 5 minutes, up to a minute apart): the next call
  starts a fresh one, so the pool recovers as soon as the server answers again.
  A connect already in flight when the server comes back may still fail the
  call waiting for it. A connect the server refuses for good (credentials,
  database, parameters) fails the waiting calls at once with its message.

``?pool_mode=transaction`` (PgBouncer's term; implied by an RDS Proxy host)
declares a transaction pooler: no prepared statements and no session state,
so the domain database keeps only the client-side bound. ``session`` (the
default) is a direct connection or a session pooler.

Options already in the URL (``connect_timeout``, ``keepalives*``,
``tcp_user_timeout``, ``statement_timeout`` inside ``options``) win; a URL's own
``options`` are sent as given, so leave them out behind a pooler.

Every pool built here that is still open when the interpreter exits is closed
by an ``atexit`` hook: since Python 3.13 an unclosed pool's ``__del__`` joins
its worker threads during interpreter shutdown and can hang the process there
for good. A Lambda handler's module-level pool has no other moment
to be closed; callers that can should still close theirs explicitly.
"""

from __future__ import annotations

import atexit
import math
import weakref
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool

from ...errors import ConfigError
from .connection import (
    SET_SESSION_STATEMENT_TIMEOUT,
    BoundedConnection,
    FailFastPool,
    RefreshingConninfo,
    check_on_checkout,
    prepare_threshold_for,
)
from .options import check_values, split_options


def _sets_own_statement_timeout(conninfo: str) -> bool:
    return "statement_timeout" in str(conninfo_to_dict(conninfo).get("options", ""))


def bounded_conninfo(conninfo: str, timeout: float) -> str:
    """``conninfo`` plus the connect and TCP bounds it does not set (no startup
    ``options``: poolers refuse them). Raises ConfigError for a malformed one,
    or a value libpq would refuse only when connecting (options.py)."""
    try:
        given = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(f"malformed PostgreSQL URL: {exc}") from exc
    check_values(given)
    half = timeout / 2
    defaults: dict[str, Any] = {
        "connect_timeout": max(2, math.ceil(half)),
        "keepalives": 1,
        "keepalives_idle": max(1, math.ceil(half)),
        "keepalives_interval": max(1, math.ceil(half / 3)),
        "keepalives_count": 3,
        "tcp_user_timeout": math.ceil(half * 1000),
    }
    extra = {key: value for key, value in defaults.items() if key not in given}
    return make_conninfo(conninfo, **extra)


def bounded_pool(
    url: str, *, name: str, max_size: int, autocommit: bool, session_bound: bool = False,
    refresh_url: Callable[[], str] | None = None, prepares: bool = True,
) -> ConnectionPool[Any]:
    """An open pool for ``url`` (``?timeout=`` seconds, ``?pool_mode=``, see the
    module docstring); connections are opened lazily. Each connection carries
    the server's statement bound for :func:`bound_this_transaction`; with
    ``session_bound`` it is also set once per session, unless the URL declares
    a transaction pooler (a session setting would stay on a server connection
    that other clients then get). ``refresh_url`` (optional) returns the URL
    with fresh credentials: it is called once after an authentication failure
    (a rotated password) and the connection retried once. ``prepares=False``
    turns psycopg's prepared statements off whatever the URL declares (see
    :func:`~onceonly.stores.postgres.connection.prepare_threshold_for`). Raises
    ConfigError for a malformed URL."""
    conninfo, options = split_options(url)
    half = options.timeout / 2
    bounded = bounded_conninfo(conninfo, options.timeout)  # ConfigError for a malformed one
    statement_timeout_ms = None if _sets_own_statement_timeout(bounded) else math.ceil(half * 1000)
    source: str | RefreshingConninfo = bounded
    connection_class: type[BoundedConnection] = BoundedConnection
    if refresh_url is not None:
        source = RefreshingConninfo(
            bounded, lambda: bounded_conninfo(split_options(refresh_url())[0], options.timeout))
        connection_class = source.connection_class

    def configure(conn: BoundedConnection) -> None:
        conn.reply_timeout = half
        conn.statement_timeout_ms = statement_timeout_ms
        if session_bound and statement_timeout_ms is not None and not options.transaction_pooled:
            with conn.transaction():
                conn.execute(SET_SESSION_STATEMENT_TIMEOUT.format(ms=statement_timeout_ms))

    pool: ConnectionPool[Any] = FailFastPool(
        source,
        connection_class=connection_class,
        kwargs={"autocommit": autocommit, "prepare_threshold": prepare_threshold_for(options.transaction_pooled,
                                                                                prepares=prepares)},
        min_size=0,
        max_size=max_size,
        timeout=half,
        # Give up a failed background connect soon: the next call starts a fresh
        # one at once, instead of waiting out a backoff grown during an outage.
        reconnect_timeout=half,
        check=check_on_checkout,
        configure=configure,
        open=True,
        name=name,
    )
    _OPEN_POOLS.add(pool)
    return pool


# The pools built by bounded_pool, held weakly: one collected early needs nothing.
_OPEN_POOLS: weakref.WeakSet[ConnectionPool[Any]] = weakref.WeakSet()


@atexit.register
def _close_open_pools() -> None:
    """Close, before interpreter shutdown, each pool nobody closed (see the module docstring)."""
    for pool in list(_OPEN_POOLS):
        pool.close()
