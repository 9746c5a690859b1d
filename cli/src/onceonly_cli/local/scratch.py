"""Scratch space of one run on a shared server: a database, a Redis key prefix
or a DynamoDB table of its own, removed afterwards. A simulation uses one per
run, so that two runs (or a run and the user's own data) never meet; the test
suite uses them the same way.

Drivers are imported inside the functions: only the store in use pays for its."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


def with_database(url: str, database: str) -> str:
    """``url`` pointed at another database on the same server."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + database))


def create_database(server_url: str, name: str) -> str:
    """Create database ``name`` on the server of ``server_url``; its URL."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(server_url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return with_database(server_url, name)


def drop_database(server_url: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(server_url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@contextmanager
def scratch_database(server_url: str, prefix: str) -> Iterator[str]:
    """A fresh database on the server of ``server_url``, dropped at exit."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    url = create_database(server_url, name)
    try:
        yield url
    finally:
        drop_database(server_url, name)


def redis_prefix(url: str) -> str | None:
    return dict(parse_qsl(urlsplit(url).query)).get("prefix")


def with_prefix(url: str, prefix: str) -> str:
    """``url`` with onceonly's key prefix option set to ``prefix``."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "prefix"] + [("prefix", prefix)]
    return urlunsplit(parts._replace(query=urlencode(query)))


def redis_cluster_url(url: str) -> bool:
    """Whether the Redis store URL ``url`` names a cluster (``cluster=1``)."""
    return dict(parse_qsl(urlsplit(url).query)).get("cluster", "").lower() in ("1", "true")


def redis_admin_client(url: str) -> Any:
    """A plain redis-py client for the store URL ``url`` (a ``RedisCluster``
    with ``cluster=1``; the CA bundle kept), to scan and delete a prefix."""
    import redis

    options = dict(parse_qsl(urlsplit(url).query))
    tls = {"ssl_ca_certs": options["ssl_ca_certs"]} if "ssl_ca_certs" in options else {}
    if redis_cluster_url(url):
        return redis.RedisCluster.from_url(url.split("?", 1)[0], socket_connect_timeout=5, **tls)
    return redis.Redis.from_url(url.split("?", 1)[0], socket_connect_timeout=5, **tls)


def delete_prefix(url: str) -> None:
    """Delete every key under the prefix of the store URL ``url`` (on every
    primary of a cluster: redis-py splits a delete by slot there)."""
    prefix = redis_prefix(url)
    if not prefix:
        raise ValueError(f"{url} names no prefix: refusing to delete a whole database")
    client = redis_admin_client(url)
    try:
        batch: list[bytes] = []
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            batch.append(key)
            if len(batch) == 500:
                client.delete(*batch)
                batch.clear()
        if batch:
            client.delete(*batch)
    finally:
        client.close()


@contextmanager
def scratch_redis_prefix(server_url: str, prefix: str) -> Iterator[str]:
    """A Redis URL whose stores use a fresh key prefix; its keys are deleted at exit."""
    url = with_prefix(server_url, f"{prefix}-{secrets.token_hex(4)}")
    try:
        yield url
    finally:
        delete_prefix(url)


def with_table(url: str, table: str) -> str:
    """A ``dynamodb://`` URL naming another table, same options."""
    return urlunsplit(urlsplit(url)._replace(netloc=table))


def delete_table(url: str) -> None:
    """Delete the table of the ``dynamodb://TABLE?…`` URL, if it exists, and wait
    until it is gone (deletion is asynchronous, even on dynalite)."""
    import boto3

    parts = urlsplit(url)
    options = dict(parse_qsl(parts.query))
    client = boto3.client("dynamodb", region_name=options.get("region") or "us-east-1",
                          endpoint_url=options.get("endpoint_url"))
    try:
        client.delete_table(TableName=parts.netloc)
        client.get_waiter("table_not_exists").wait(TableName=parts.netloc,
                                                   WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    except client.exceptions.ResourceNotFoundException:
        pass
    finally:
        client.close()
