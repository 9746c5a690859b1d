"""Clients built once per warm container and reused by every invocation:
the domain database pool and the coordination store. Both re-read their
secret once when PostgreSQL refuses the credentials (a rotated password)."""

from __future__ import annotations

from functools import cache
from typing import Any

from psycopg_pool import ConnectionPool

import onceonly
from onceonly.postgres import bounded_pool

from .settings import database_url, store_url


@cache
def db_pool() -> ConnectionPool[Any]:
    """The domain PostgreSQL pool (autocommit off: callers use transactions).
    Bounded like the coordination store's (``?timeout=`` in DATABASE_URL, default
    10 s): a dead database fails each statement fast, well before the Lambda's
    own timeout, and the transaction it was in rolls back. After an
    authentication failure the secret is read again once (rotation)."""
    return bounded_pool(database_url(), name="db", max_size=2, autocommit=False, session_bound=True,
                        refresh_url=lambda: database_url(refresh=True))


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
