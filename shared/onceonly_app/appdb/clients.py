"""Clients built once per warm container and reused by every invocation:
the domain database pool and the coordination store. Both re-read their
secret once when PostgreSQL refuses the credentials (a rotated password)."""

from __future__ import annotations

from functools import cache

from psycopg_pool import ConnectionPool

import onceonly
from onceonly.stores.pg_connection import RefreshingConninfo, prepare_threshold_for

from .settings import database_url, store_url


@cache
def db_pool() -> ConnectionPool:
    """The domain PostgreSQL pool (autocommit off: callers use transactions)."""
    url = database_url()
    conninfo = RefreshingConninfo(url, lambda: database_url(refresh=True))
    return ConnectionPool(conninfo, connection_class=conninfo.connection_class, min_size=0, max_size=2,
                          timeout=10.0, kwargs={"prepare_threshold": prepare_threshold_for(url)}, open=True,
                          name="appdb")


@cache
def coordination_store() -> onceonly.Store:
    """The onceonly store chosen by configuration (PostgreSQL, Redis or DynamoDB)."""
    return onceonly.connect(store_url(), refresh_url=lambda: store_url(refresh=True))


def reset() -> None:
    """Close and forget this process's clients (tests and the local CLI switch
    databases and stores within one process)."""
    for build in (db_pool, coordination_store):
        if build.cache_info().currsize:
            build().close()
            build.cache_clear()
