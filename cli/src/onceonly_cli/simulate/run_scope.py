"""A simulation's own database and store, removed when the run ends: runs use
today's tick times (schedule.py), so two runs on one server must never share
tick records, rows or queue items, and a run must leave the user's data alone.

- the domain database: ``onceonly_sim_RUN`` on the PostgreSQL server given by
  --database (or the embedded one);
- the store: the run's database for PostgreSQL (a database of its own when
  --store names another PostgreSQL), the key prefix ``PREFIX-sim-RUN`` on
  Redis, the table ``TABLE-sim-RUN`` on DynamoDB."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from ..errors import CliError
from ..local.scratch import (
    create_database,
    delete_prefix,
    delete_table,
    drop_database,
    redis_prefix,
    with_prefix,
    with_table,
)
from ..local.stores import redact

Closer = Callable[[], None]


def run_database(server_url: str, run_id: str, closers: list[Closer], suffix: str = "") -> str:
    """A fresh database for the run on the server of ``server_url``; dropped by a closer."""
    import psycopg

    name = f"onceonly_sim_{run_id}{suffix}"
    try:
        url = create_database(server_url, name)
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CliError(f"cannot create the run's database on {redact(server_url)}: {reason}") from None
    closers.append(lambda: drop_database(server_url, name))
    return url


def run_store(store_url: str, run_id: str, closers: list[Closer]) -> str:
    """``store_url`` narrowed to this run; what the run writes there is removed by a
    closer (the stack runs them at its end, ignoring their errors)."""
    scheme = urlsplit(store_url).scheme.lower()
    if scheme in ("postgresql", "postgres"):
        return run_database(store_url, run_id, closers, suffix="_store")
    if scheme in ("redis", "rediss"):
        scoped = with_prefix(store_url, f"{redis_prefix(store_url) or 'onceonly'}-sim-{run_id}")
        closers.append(lambda: delete_prefix(scoped))
        return scoped
    if scheme == "dynamodb":
        scoped = with_table(store_url, f"{urlsplit(store_url).netloc}-sim-{run_id}")
        closers.append(lambda: delete_table(scoped))
        return scoped
    return store_url  # not a store URL: connecting to it fails with a clear error
