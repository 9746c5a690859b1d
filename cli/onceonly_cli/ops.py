"""What `onceonly status` and `onceonly redrive` share: the domain database and
the coordination store they look at, opened with one-line errors."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import onceonly

from .errors import CliError
from .servers import DEFAULT_POSTGRES_URL
from .stores import check_database, open_store

DEFAULT_QUEUE = "webhook-retries"


@dataclass
class Ops:
    pool: Any  # psycopg_pool.ConnectionPool of the domain database
    store: onceonly.Store
    queue_name: str


@contextmanager
def open_ops(database: str | None, store: str | None) -> Iterator[Ops]:
    """Options, then $DATABASE_URL / $ONCEONLY_STORE_URL, then the local PostgreSQL
    (never an embedded one: a fresh server would have nothing to show)."""
    from psycopg_pool import ConnectionPool

    database_url = database or os.environ.get("DATABASE_URL") or DEFAULT_POSTGRES_URL
    store_url = store or os.environ.get("ONCEONLY_STORE_URL") or database_url
    check_database(database_url)
    opened = open_store(store_url, setup=False)
    pool = ConnectionPool(database_url, min_size=0, max_size=1, timeout=5, open=True, name="onceonly-cli")
    try:
        yield Ops(pool, opened, os.environ.get("WEBHOOK_QUEUE") or DEFAULT_QUEUE)
    finally:
        pool.close()
        opened.close()


def missing_tables(exc: Exception) -> CliError:
    return CliError(f"the database lacks onceonly's tables ({str(exc).splitlines()[0]}); "
                    "apply them with `onceonly migrate --database URL`")
