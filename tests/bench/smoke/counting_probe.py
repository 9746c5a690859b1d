"""A worker job for test_counting.py: known exchanges with each server, and
the round trips bench/counting.py saw for each (run in a bench worker process,
where the counting hooks are installed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench import counting
from bench.pool import Job


def _trips(action: Callable[[], Any]) -> int:
    before = counting.ROUND_TRIPS
    action()
    return counting.ROUND_TRIPS - before


def probe(postgres_url: str, redis_url: str, dynalite_endpoint: str) -> Job:
    import boto3
    import psycopg
    import redis

    yield
    seen: dict[str, int] = {}
    conn = psycopg.connect(postgres_url, autocommit=True)
    seen["pg statement"] = _trips(lambda: conn.execute("SELECT 1"))
    seen["pg commit with nothing open"] = _trips(conn.commit)

    def pipeline_of_two() -> None:
        with conn.pipeline():
            conn.execute("SELECT set_config('statement_timeout', '5000', true)")
            conn.execute("SELECT 1")

    seen["pg pipeline of two, one sync"] = _trips(pipeline_of_two)
    conn.close()
    client = redis.Redis.from_url(redis_url)
    client.ping()  # connects (its handshake is not what is measured)
    seen["redis command"] = _trips(client.ping)
    seen["redis pipeline of three"] = _trips(lambda: client.pipeline(transaction=False).ping().ping().ping().execute())
    dynamodb = counting.count_calls(boto3.client("dynamodb", region_name="us-east-1",
                                                 endpoint_url=dynalite_endpoint))
    seen["dynamodb call"] = _trips(dynamodb.list_tables)
    return {"seen": seen}
