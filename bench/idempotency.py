"""Once-per-record guards on DynamoDB (dynalite): Powertools Idempotency
(``idempotent_function``) beside onceonly's cron guard (``acquire`` +
``complete``, what ``@onceonly.scheduled`` does), records/s and API calls per
record counted with botocore's ``before-call`` hook. Each process guards its
own share of distinct records, so the figure is the guard's own cost."""

from __future__ import annotations

import secrets
import sys
import warnings
from typing import Any

import boto3

from bench import counting
from bench.places import Places
from bench.pool import Job, Workers
from bench.queue_jobs import Tally
from bench.sizes import Sizes
from bench.stores import open_store


def _client(endpoint: str) -> Any:
    return boto3.client("dynamodb", region_name="us-east-1", endpoint_url=endpoint)


def powertools(endpoint: str, table: str, keys: list[str]) -> Job:
    from aws_lambda_powertools.utilities.idempotency import (
        DynamoDBPersistenceLayer,
        IdempotencyConfig,
        idempotent_function,
    )

    # Outside Lambda there is no remaining time to read; Powertools warns once per record.
    warnings.filterwarnings("ignore", message="Couldn't determine the remaining time left")
    client = counting.count_calls(_client(endpoint))
    persistence = DynamoDBPersistenceLayer(table_name=table, boto3_client=client)
    config = IdempotencyConfig(expires_after_seconds=3600, use_local_cache=False)

    @idempotent_function(data_keyword_argument="record", persistence_store=persistence, config=config)
    def process(record: dict[str, str]) -> dict[str, str]:
        ran.append(record["id"])
        return record

    client.describe_table(TableName=table)
    tally, ran = Tally(), list[str]()
    yield
    for key in keys:
        tally("record", process, record={"id": key})
    return tally.result(ran)


def onceonly_guard(url: str, keys: list[str]) -> Job:
    store = open_store(url)
    store.inspect("warm-up")
    tally, ran = Tally(), list[str]()
    yield
    for key in keys:
        lease = tally("record", store.acquire, key, ttl=60)
        if lease is not None:
            ran.append(key)
            tally("record", store.complete, lease, keep=3600)
    return tally.result(ran)


def _powertools_table(endpoint: str) -> str:
    table = f"powertools-bench-{secrets.token_hex(3)}"
    _client(endpoint).create_table(
        TableName=table, BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}])
    return table


def run(workers: Workers, places: Places, sizes: Sizes) -> list[dict[str, Any]]:
    endpoint = places.dynalite_endpoint
    guard_url = places.dynamodb_url(f"onceonly-guard-{places.run_id}")
    open_store(guard_url).setup()
    methods = {
        "Powertools Idempotency": ("bench.idempotency:powertools",
                                   {"endpoint": endpoint, "table": _powertools_table(endpoint)}),
        "onceonly guard (acquire + complete)": ("bench.idempotency:onceonly_guard", {"url": guard_url}),
    }
    runs = []
    n = sizes.idempotency_records
    for method, (job, base) in methods.items():
        for processes in sizes.idempotency_processes:
            for rep in range(sizes.repeat):
                keys = [f"r-{secrets.token_hex(4)}-{i}" for i in range(n)]
                race = workers.race(job, [{**base, "keys": keys[p::processes]} for p in range(processes)])
                ran = [i for r in race.results for i in r["ids"]]
                calls = sum(r["round_trips"].get("record", 0) for r in race.results)
                runs.append({"section": "idempotency", "method": method, "processes": processes, "rep": rep,
                             "items": n, "elapsed": race.elapsed, "per_second": n / race.elapsed,
                             "calls_per_record": calls / n, "duplicates": len(ran) - len(set(ran)),
                             "lost": n - len(set(ran)), "overlapped": processes == 1 or race.overlapped})
        print(f"idempotency: {method} done", file=sys.stderr, flush=True)
    return runs
