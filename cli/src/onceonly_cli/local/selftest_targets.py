"""Where `onceonly selftest` writes on each kind of store, how it tells whether
the store already holds other onceonly data, and how it removes its own.

Every name a run uses starts with ``onceonly-selftest-<random>``:

- Redis: the run's keys live under that key prefix (the URL's ``prefix`` option
  is replaced), and the whole prefix is deleted afterwards. Other data: any key
  under the URL's own prefix (``onceonly`` unless ``?prefix=`` says otherwise).
- PostgreSQL: lease names and the queue name start with it, in the store's
  usual tables (``setup()`` creates them if missing); its rows are deleted
  afterwards. Other data: any row of onceonly_leases or onceonly_queue whose
  name does not start with ``onceonly-selftest-``.
- DynamoDB: lease names and the queue name start with it, in the URL's table
  (``setup()`` creates it if missing); its items are deleted afterwards.
  Other data: any item of the table that is not a selftest's."""

from __future__ import annotations

import secrets
from urllib.parse import parse_qsl, urlsplit

import onceonly

from .scratch import delete_prefix, redis_admin_client, redis_prefix, with_prefix
from .selftest_worker import Plan

PREFIX = "onceonly-selftest-"
REDIS_DEFAULT_PREFIX = "onceonly"  # RedisStore's default key prefix


def new_prefix() -> str:
    return PREFIX + secrets.token_hex(4)


def scheme(url: str) -> str:
    name = urlsplit(url).scheme.lower()
    return {"postgres": "postgresql", "rediss": "redis"}.get(name, name)


def run_url(url: str, prefix: str) -> str:
    """The store URL the run uses: Redis gets the run's own key prefix."""
    return with_prefix(url, prefix) if scheme(url) == "redis" else url


def other_data(url: str) -> str | None:
    """What other onceonly data the store holds (one line), or None."""
    kind = scheme(url)
    if kind == "redis":
        return _redis_other_data(url)
    if kind == "postgresql":
        return _postgres_other_data(url)
    return _dynamodb_other_data(url)


def cleanup(url: str, store: onceonly.Store, plan: Plan) -> None:
    """Remove every record of the run (``url`` as given to :func:`run_url`)."""
    kind = scheme(url)
    if kind == "redis":
        delete_prefix(url)
        return
    queue = store.queue(plan.queue_name)
    if queue.depth().total:  # left by a run that stopped early
        for item_id in plan.item_ids:
            queue.cancel(item_id)
    if kind == "postgresql":
        _postgres_delete_leases(url, plan)
    else:
        _dynamodb_delete_leases(url, plan)


def _redis_other_data(url: str) -> str | None:
    prefix = redis_prefix(url) or REDIS_DEFAULT_PREFIX
    client = redis_admin_client(url)
    try:
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            return f"keys under the prefix {prefix!r} (e.g. {key.decode(errors='replace')!r})"
    finally:
        client.close()
    return None


_PG_OTHER_ROWS = """
SELECT (SELECT count(*) FROM (SELECT 1 FROM onceonly_leases WHERE NOT starts_with(name, %(p)s) LIMIT 1) l),
       (SELECT count(*) FROM (SELECT 1 FROM onceonly_queue WHERE NOT starts_with(queue, %(p)s) LIMIT 1) q)
"""


def _postgres_other_data(url: str) -> str | None:
    import psycopg

    with psycopg.connect(url, connect_timeout=10) as conn:
        tables = conn.execute("SELECT to_regclass('onceonly_leases') IS NOT NULL "
                              "AND to_regclass('onceonly_queue') IS NOT NULL").fetchone()
        if not tables or not tables[0]:
            return None
        row = conn.execute(_PG_OTHER_ROWS, {"p": PREFIX}).fetchone()
    if row and (row[0] or row[1]):
        return "rows in onceonly_leases or onceonly_queue"
    return None


def _postgres_delete_leases(url: str, plan: Plan) -> None:
    import psycopg

    with psycopg.connect(url, connect_timeout=10) as conn:
        conn.execute("DELETE FROM onceonly_leases WHERE starts_with(name, %s)", (plan.prefix,))


def _dynamodb_client(url: str):  # type: ignore[no-untyped-def]
    import boto3

    options = dict(parse_qsl(urlsplit(url).query))
    return boto3.client("dynamodb", region_name=options.get("region"), endpoint_url=options.get("endpoint_url"))


def _dynamodb_other_data(url: str) -> str | None:
    from onceonly.dynamodb import LEASE_PREFIX, QUEUE_PREFIX

    table = urlsplit(url).netloc
    client = _dynamodb_client(url)
    try:
        for page in client.get_paginator("scan").paginate(TableName=table, ProjectionExpression="pk"):
            for item in page.get("Items", []):
                pk = item["pk"]["S"]
                if not pk.startswith((LEASE_PREFIX + PREFIX, QUEUE_PREFIX + PREFIX)):
                    return f"items in table {table!r} (e.g. {pk!r})"
    except client.exceptions.ResourceNotFoundException:
        return None
    finally:
        client.close()
    return None


def _dynamodb_delete_leases(url: str, plan: Plan) -> None:
    from onceonly.dynamodb import LEASE_PREFIX

    client = _dynamodb_client(url)
    try:
        for name in plan.lease_names:
            client.delete_item(TableName=urlsplit(url).netloc, Key={"pk": {"S": LEASE_PREFIX + name}})
    finally:
        client.close()
