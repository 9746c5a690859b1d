"""Which domain database and coordination store a command talks to, and a
quick reachability check that turns driver errors into one readable line."""

from __future__ import annotations

import os
from dataclasses import dataclass

import onceonly

from ..errors import CliError
from ..testing.servers import LocalServers, ServerSetupError
from ..testing.standins import check_standin, start_standin, store_keyword

PING_NAME = "onceonly-cli:ping"


@dataclass(frozen=True)
class Targets:
    database_url: str
    store_url: str


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def resolve_targets(
    database: str | None, store: str | None, servers: LocalServers | None, *, embedded: bool = False
) -> Targets:
    """Options win over env vars (DATABASE_URL, ONCEONLY_STORE_URL). Without either,
    a local PostgreSQL is used (``servers`` may start an embedded one); the
    coordination store defaults to the same PostgreSQL as the domain data. A store
    keyword (redis, dynamodb, ...) means the local server or a stand-in
    (standins.py)."""
    database = database or os.environ.get("DATABASE_URL")
    store = store or os.environ.get("ONCEONLY_STORE_URL")
    kind = store_keyword(store)
    if kind is not None and servers is not None:
        check_standin(kind, reuse_local=True)  # before the database starts: fail first, not half-way
    if not database:
        if servers is None:
            raise CliError("no domain database: pass --database postgresql://… or set DATABASE_URL")
        try:
            database = servers.postgres(embedded=embedded)
        except ServerSetupError as exc:
            raise CliError(str(exc)) from None
    if kind is not None and servers is not None:
        store = start_standin(kind, servers, database, reuse_local=True)
    return Targets(database_url=database, store_url=store or database)


def check_database(url: str, timeout: int = 3) -> None:
    import psycopg

    from onceonly.postgres import split_options

    if not url.startswith(("postgresql://", "postgres://")):
        raise CliError(f"--database must be a postgresql:// URL, got {redact(url)!r}")
    try:
        with psycopg.connect(split_options(url)[0], connect_timeout=timeout):  # without onceonly's options
            pass
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CliError(f"database {redact(url)} is unreachable: {reason}") from None


def open_store(url: str, *, setup: bool) -> onceonly.Store:
    """Connect and make one round trip, so an unreachable store fails here, clearly."""
    try:
        store = onceonly.connect(url)
    except onceonly.ConfigError as exc:
        raise CliError(f"bad store URL: {exc}") from None
    try:
        if setup:
            store.setup()
        store.inspect(PING_NAME)
    except onceonly.StoreNotReadyError:
        store.close()
        raise CliError(f"store {redact(url)} is not set up: run `onceonly migrate --store URL`") from None
    except onceonly.OnceOnlyError as exc:
        store.close()
        raise CliError(f"store {redact(url)} is unreachable: {str(exc).splitlines()[0]}") from None
    return store


def migrate_database(url: str) -> None:
    import psycopg

    from onceonly_app.db.migrate import migrate

    try:
        migrate(url)
    except psycopg.Error as exc:
        raise CliError(f"migrating {redact(url)} failed: {str(exc).strip().splitlines()[0]}") from None
