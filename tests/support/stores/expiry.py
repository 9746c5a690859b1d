"""What "an expiring record is gone after its keep" means on each store, read
from the store's own data rather than through the API under test.

- Redis: the key itself is gone (the server expired it).
- PostgreSQL: a prune removes it (the guard's completions prune as they go;
  ``onceonly prune`` does the rest).
- DynamoDB: deletion is DynamoDB's TTL sweeper, which no local server runs, so
  the record must carry ``expire_at`` at or before now: the sweeper's input."""

from __future__ import annotations

import math
import time
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import boto3
import redis

import onceonly
from onceonly.dynamodb import TTL_ATTRIBUTE


def raw_lease_record(store_url: str, name: str) -> dict[str, Any] | None:
    """The lease record of ``name`` as the server holds it (None if absent)."""
    parts = urlsplit(store_url)
    options = dict(parse_qsl(parts.query))
    if parts.scheme == "dynamodb":
        client = boto3.client("dynamodb", region_name=options["region"], endpoint_url=options["endpoint_url"])
        item = client.get_item(TableName=parts.netloc, Key={"pk": {"S": f"lease#{name}"}},
                               ConsistentRead=True).get("Item")
        return None if item is None else {k: next(iter(v.values())) for k, v in item.items()}
    if parts.scheme == "redis":
        cluster = options.get("cluster") == "1"
        client = (redis.RedisCluster if cluster else redis.Redis).from_url(store_url.split("?", 1)[0],
                                                                           decode_responses=True)
        try:
            key = f"{options['prefix']}:{{lease:{name}}}"
            record = client.hgetall(key)
            return {**record, "pttl": client.pttl(key)} if record else None
        finally:
            client.close()
    import psycopg

    from onceonly.postgres import split_options

    with psycopg.connect(split_options(store_url)[0]) as conn:  # without onceonly's own options
        row = conn.execute("SELECT token, completed, expires, extract(epoch FROM busy_until)::float8 "
                           "FROM onceonly_leases WHERE name = %s", (name,)).fetchone()
    return None if row is None else {"token": row[0], "completed": row[1], "expires": row[2], "busy_until": row[3]}


def is_gone_after_keep(store: onceonly.Store, store_url: str, name: str) -> bool:
    """True once the store has removed (or, on DynamoDB, marked for removal) the
    record of ``name`` whose keep has passed."""
    if store_url.startswith("postgresql"):
        store.prune_expired()  # type: ignore[attr-defined]
    record = raw_lease_record(store_url, name)
    if store_url.startswith("dynamodb"):
        return record is not None and TTL_ATTRIBUTE in record and int(record[TTL_ATTRIBUTE]) <= time.time()
    return record is None


def wait_past_keep(done_until: float) -> None:
    """Sleep until ``done_until`` has passed, rounded up to the whole second that
    DynamoDB's TTL attribute holds, plus a margin for the server's clock."""
    time.sleep(max(0.0, math.ceil(done_until) - time.time()) + 0.3)
