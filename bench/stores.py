"""Opening onceonly stores for the suite, and filling their queues.

``put_many`` and ``claim(acks=...)`` are newer than some stores: both are
detected at run time, so the suite measures whichever API the checkout has."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import onceonly
from bench import counting

FILL_CHUNK = 1000  # items per put_many call
FILL_THREADS = 8  # concurrent put calls where there is no put_many


def open_store(url: str) -> Any:
    """``onceonly.connect(url)``; for DynamoDB, a store on a client of our own,
    so that botocore's ``before-call`` hook counts its API calls."""
    if not url.startswith("dynamodb://"):
        return onceonly.connect(url)
    import boto3
    from botocore.config import Config

    from onceonly.dynamodb import MAX_CONCURRENT_WRITES, DynamoDBStore

    parts = urlsplit(url)
    options = dict(parse_qsl(parts.query))
    client = boto3.client("dynamodb", region_name=options["region"], endpoint_url=options["endpoint_url"],
                          config=Config(max_pool_connections=2 * MAX_CONCURRENT_WRITES))
    return DynamoDBStore(counting.count_calls(client), parts.netloc)


def takes_acks(queue: Any) -> bool:
    """True when ``claim`` can carry the previous batch's acks."""
    return "acks" in inspect.signature(queue.claim).parameters


def fill(url: str, queue: Any, item_ids: Sequence[str], due_at: float | None = None) -> None:
    """Put every id (payload None) into ``queue`` of the store at ``url``. Not
    timed. With ``put_many`` if the queue has it; else PostgreSQL gets the
    store's own put statement for every id in one pipelined transaction (a
    commit per put would make filling the slowest part of the suite), and the
    other stores concurrent ``put`` calls."""
    if hasattr(queue, "put_many"):
        for start in range(0, len(item_ids), FILL_CHUNK):
            queue.put_many([(item_id, due_at, None) for item_id in item_ids[start:start + FILL_CHUNK]])
    elif url.startswith("postgresql://"):
        _fill_postgres(url, queue.name, item_ids, due_at)
    else:
        with ThreadPoolExecutor(FILL_THREADS) as pool:
            list(pool.map(lambda item_id: queue.put(item_id, due_at=due_at), item_ids))


def _fill_postgres(url: str, queue: str, item_ids: Sequence[str], due_at: float | None) -> None:
    import psycopg

    from onceonly import encode_payload
    from onceonly.postgres import STATEMENTS as SQL

    payload = encode_payload(None)
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        cur.executemany(SQL["put"], [{"queue": queue, "item_id": i, "payload": payload, "due_at": due_at}
                                     for i in item_ids])
