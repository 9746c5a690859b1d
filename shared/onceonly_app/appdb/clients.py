"""Clients built once per warm container and reused by every invocation:
the domain database pool and the coordination store."""

from __future__ import annotations

from functools import cache

from psycopg_pool import ConnectionPool

import onceonly

from .settings import database_url, store_url


@cache
def db_pool() -> ConnectionPool:
    """The domain PostgreSQL pool (autocommit off: callers use transactions)."""
    return ConnectionPool(database_url(), min_size=0, max_size=2, timeout=10.0, open=True, name="appdb")


@cache
def coordination_store() -> onceonly.Store:
    """The onceonly store chosen by configuration (PostgreSQL, Redis or DynamoDB)."""
    return onceonly.connect(store_url())


def reset() -> None:
    """Close and forget this process's clients (tests and the local CLI switch
    databases and stores within one process)."""
    for build in (db_pool, coordination_store):
        if build.cache_info().currsize:
            build().close()
            build.cache_clear()
