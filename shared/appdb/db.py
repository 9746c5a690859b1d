"""One psycopg pool per warm container for the domain database."""

from __future__ import annotations

from functools import cache

from psycopg_pool import ConnectionPool

from .settings import database_url


@cache
def pool() -> ConnectionPool:
    """Built on first use, reused by every invocation of the container."""
    return ConnectionPool(database_url(), min_size=0, max_size=2, timeout=10.0, open=True, name="appdb")
