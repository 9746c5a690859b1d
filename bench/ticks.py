"""Once-per-tick guards per second, for 1, 4 and 8 processes: onceonly's
acquire + complete on each store, side by side with Powertools Idempotency
(DynamoDB and Redis persistence layers), in one run.

    .venv/bin/python bench/ticks.py [--ticks 200] [--out FILE]

Every process walks the same tick names in its own order and runs the guarded
body for each; the body appends to the process's history file. Afterwards the
histories tell how many times each tick's body ran (must be once) and the
wall time gives guarded calls per second. All servers are on 127.0.0.1."""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import platform
import random
import secrets
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
from benchlib import PROCESS_COUNTS, Cell, median_of_runs, publish, ratio_cells, worst

import onceonly
from onceonly_cli.servers import LocalServers

CTX = multiprocessing.get_context("spawn")


def _onceonly_guard(url: str) -> Any:
    store = onceonly.connect(url)

    def guarded(name: str, body: Any) -> None:
        lease = store.acquire(name, ttl=60)
        if lease is not None:
            body()
            store.complete(lease, keep=3600)

    return guarded


def _powertools_guard(kind: str, target: str) -> Any:
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
    from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError

    if kind == "dynamodb":
        from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

        endpoint, table = target.split("|")
        client = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")
        persistence: Any = DynamoDBPersistenceLayer(table_name=table, boto3_client=client)
    else:
        import redis
        from aws_lambda_powertools.utilities.idempotency.persistence.redis import RedisCachePersistenceLayer

        persistence = RedisCachePersistenceLayer(client=redis.Redis.from_url(target))
    config = IdempotencyConfig(expires_after_seconds=3600, use_local_cache=False)

    def guarded(name: str, body: Any) -> None:
        @idempotent_function(data_keyword_argument="tick", persistence_store=persistence, config=config)
        def run(tick: str) -> str:
            body()
            return tick

        # Another process running this tick now is the expected contention.
        with contextlib.suppress(IdempotencyAlreadyInProgressError):
            run(tick=name)

    return guarded


def _worker(method: tuple[str, str, str], names: list[str], history: str, barrier: Any, seed: int) -> None:
    family, kind, target = method
    guarded = _onceonly_guard(target) if family == "onceonly" else _powertools_guard(kind, target)
    order = names[:]
    random.Random(seed).shuffle(order)
    with open(history, "a", encoding="utf-8") as log:
        barrier.wait()
        for name in order:
            guarded(name, lambda n=name: (log.write(n + "\n"), log.flush()))


def run_cell(method: tuple[str, str, str], ticks: int, processes: int, workdir: Path) -> Cell:
    names = [f"tick-{secrets.token_hex(4)}-{i}" for i in range(ticks)]
    histories = [str(workdir / f"{secrets.token_hex(4)}.log") for _ in range(processes)]
    barrier = CTX.Barrier(processes + 1)
    procs = [CTX.Process(target=_worker, args=(method, names, h, barrier, n)) for n, h in enumerate(histories)]
    for p in procs:
        p.start()
    barrier.wait()
    start = time.perf_counter()
    for p in procs:
        p.join()
    elapsed = time.perf_counter() - start
    runs = Counter(line for h in histories if Path(h).exists() for line in Path(h).read_text().splitlines())
    return {
        "per_second": ticks * processes / elapsed,
        "duplicates": sum(c - 1 for c in runs.values()),
        "missed": ticks - len(runs),
    }


def _powertools_table(endpoint: str) -> str:
    table = f"pt-{secrets.token_hex(4)}"
    client = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")
    client.create_table(TableName=table, BillingMode="PAY_PER_REQUEST",
                        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}])
    return table


def main() -> int:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ[var] = "bench"  # dynalite ignores them; boto3 wants some, never real ones
    os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
    os.environ.pop("AWS_PROFILE", None)
    os.environ.pop("POWERTOOLS_IDEMPOTENCY_DISABLED", None)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    servers = LocalServers()
    rows: list[tuple[str, dict[int, Cell]]] = []
    try:
        endpoint = servers.dynalite()
        redis_url = servers.redis()
        dynamo_url = f"dynamodb://bench-{secrets.token_hex(3)}?region=us-east-1&endpoint_url={endpoint}"
        methods = {
            "onceonly on PostgreSQL": ("onceonly", "postgresql", servers.postgres()),
            "onceonly on Redis": ("onceonly", "redis", redis_url),
            "onceonly on DynamoDB (dynalite)": ("onceonly", "dynamodb", dynamo_url),
            "Powertools Idempotency on DynamoDB (dynalite)": (
                "powertools", "dynamodb", f"{endpoint}|{_powertools_table(endpoint)}"),
            "Powertools Idempotency on Redis": ("powertools", "redis", redis_url),
        }
        for method in methods.values():
            if method[0] == "onceonly":
                onceonly.connect(method[2]).setup()
        with tempfile.TemporaryDirectory() as tmp:
            for label, method in methods.items():
                rows.append((label, {
                    p: median_of_runs(lambda m=method, p=p: run_cell(m, args.ticks, p, Path(tmp)), args.repeat)
                    for p in PROCESS_COUNTS}))
                print(f"done: {label}", file=sys.stderr)
    finally:
        servers.stop()
    publish(_markdown(rows, args.ticks), args.out)
    return 0


def _markdown(rows: list[tuple[str, dict[int, Cell]]], ticks: int) -> str:
    base = rows[0][1][1]["per_second"]
    head = " | ".join(f"{p} proc calls/s (x onceonly PG 1 proc)" for p in PROCESS_COUNTS)
    lines = [f"| guard | {head} | bodies run twice (worst) | ticks never run (worst) |",
             "|---|" + "---|" * (len(PROCESS_COUNTS) + 2)]
    for label, cells in rows:
        lines.append(f"| {label} | {ratio_cells(cells, base)} | {worst(cells, 'duplicates')} "
                     f"| {worst(cells, 'missed')} |")
    lines += ["", f"{ticks} tick names per run, every process calls every tick; median calls/s of runs; "
              f"Python {platform.python_version()}, {multiprocessing.cpu_count()} cores."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
