"""The PostgreSQL pieces of onceonly that an application may use on its own
database too. Importing this module imports psycopg and psycopg_pool (the
``postgres`` extra); ``import onceonly`` does not.

- :func:`bounded_pool`: a psycopg pool that never hangs (every wait bounded by
  the URL's ``?timeout=``), fails fast on a connection the server refuses for
  good, re-reads a rotated secret once, and is closed at interpreter exit;
- :func:`split_options`: a URL -> the conninfo for libpq and onceonly's own
  options (:class:`PgOptions`: ``timeout``, ``pool_mode``);
- :func:`prepare_threshold_for`: psycopg's ``prepare_threshold`` for a
  connection that may sit behind a transaction pooler;
- :class:`PostgresStore`, :class:`PostgresQueue`: the store ``connect()``
  builds for a ``postgresql://`` URL, or around a pool of your own;
- :data:`STATEMENTS`: the store's named SQL statements, read-only, for
  tools that EXPLAIN or load-test exactly what the store runs.

docs/coordination.md, "PostgreSQL poolers and proxies" and "Time bounds",
explains the bounds and the pooler rules."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from .stores.postgres.connection import prepare_threshold_for
from .stores.postgres.options import PgOptions, split_options
from .stores.postgres.pool import bounded_pool
from .stores.postgres.queue import PostgresQueue
from .stores.postgres.store import SQL, PostgresStore

STATEMENTS: Mapping[str, str] = MappingProxyType(SQL)

__all__ = ["STATEMENTS", "PgOptions", "PostgresQueue", "PostgresStore", "bounded_pool", "prepare_threshold_for",
           "split_options"]
