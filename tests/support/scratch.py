"""Scratch space on a shared server: a database or a Redis key prefix of one
test run's own, removed afterwards, so that tests leave the user's data alone
and runs from two checkouts never see each other's rows."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import redis
from psycopg import sql


def with_database(url: str, database: str) -> str:
    """``url`` pointed at another database on the same server."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + database))


@contextmanager
def scratch_database(server_url: str, prefix: str) -> Iterator[str]:
    """Create a fresh database on the server of ``server_url``; drop it at exit."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_database(server_url, name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def with_prefix(url: str, prefix: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "prefix"] + [("prefix", prefix)]
    return urlunsplit(parts._replace(query=urlencode(query)))


@contextmanager
def scratch_redis_prefix(server_url: str, prefix: str) -> Iterator[str]:
    """A Redis URL whose stores use a fresh key prefix; its keys are deleted at exit."""
    name = f"{prefix}-{secrets.token_hex(4)}"
    try:
        yield with_prefix(server_url, name)
    finally:
        client = redis.Redis.from_url(server_url)
        try:
            for batch in _batches(client.scan_iter(match=f"{name}:*", count=1000), 500):
                client.delete(*batch)
        finally:
            client.close()


def _batches(keys: Iterator[bytes], size: int) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    for key in keys:
        batch.append(key)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
