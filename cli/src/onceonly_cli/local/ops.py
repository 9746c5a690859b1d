"""What `onceonly status` and `onceonly redrive` share: the domain database and
the coordination store they look at, opened with one-line errors."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import onceonly
from onceonly_app.webhooks.config import DEFAULT_QUEUE

from ..errors import CliError
from ..testing.servers import DEFAULT_POSTGRES_URL
from ..testing.standins import existing_store, store_keyword
from .stores import check_database, open_store


@dataclass
class Ops:
    pool: Any  # psycopg_pool.ConnectionPool of the domain database
    store: onceonly.Store
    queue_name: str


def existing_targets(database: str | None, store: str | None) -> tuple[str, str]:
    """(database URL, store URL) of a command that reads what is there: options,
    then $DATABASE_URL / $ONCEONLY_STORE_URL, then the local PostgreSQL (never an
    embedded one: a fresh server would have nothing to show). A store keyword
    names the local server of that kind (standins.existing_store)."""
    database_url = database or os.environ.get("DATABASE_URL") or DEFAULT_POSTGRES_URL
    store_url = store or os.environ.get("ONCEONLY_STORE_URL") or database_url
    kind = store_keyword(store_url)
    return database_url, store_url if kind is None else existing_store(kind, database_url)


@contextmanager
def open_ops(database: str | None, store: str | None) -> Iterator[Ops]:
    """The domain database and the store of :func:`existing_targets`, checked."""
    from onceonly.postgres import bounded_pool

    database_url, store_url = existing_targets(database, store)
    check_database(database_url)
    opened = open_store(store_url, setup=False)
    # as the functions' own pool: onceonly's URL options, bounds, poolers
    pool = bounded_pool(database_url, name="onceonly-cli", max_size=1, autocommit=False, session_bound=True)
    try:
        yield Ops(pool, opened, os.environ.get("WEBHOOK_QUEUE") or DEFAULT_QUEUE)
    finally:
        pool.close()
        opened.close()


def missing_tables(exc: Exception) -> CliError:
    return CliError(f"the database lacks onceonly's tables ({str(exc).splitlines()[0]}); "
                    "apply them with `onceonly migrate --database URL`")
