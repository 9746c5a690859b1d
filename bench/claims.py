"""Claims per second per backend, for 1, 4 and 8 processes, side by side with
the racy two-step Redis pop the project replaces, in one run.

    .venv/bin/python bench/claims.py [--items 2000] [--out docs/benchmarks.md]

Each run fills a queue, then P processes (each with its own connection,
released by one barrier) claim batches of 25 and ack them in one call until
the queue is empty. Throughput = items / wall time. Duplicates are counted
from the claimed ids, so a fast-but-wrong method shows as such. All servers
are on 127.0.0.1: PostgreSQL and Redis as found (or embedded), dynalite
started here."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import secrets
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis
from benchlib import PROCESS_COUNTS, Cell, median_of_runs, publish, ratio_cells, worst

import onceonly
from onceonly_cli.servers import LocalServers

CTX = multiprocessing.get_context("spawn")
BATCH = 25


def _claim_worker(url: str, queue: str, barrier: Any, results: Any) -> None:
    store = onceonly.connect(url)
    q = store.queue(queue)
    got: list[str] = []
    barrier.wait()
    while True:
        claims = q.claim(limit=BATCH, lease=60)
        if not claims:
            break
        q.ack_many(claims)
        got.extend(c.item_id for c in claims)
    results.put(got)
    store.close()


def _naive_redis_worker(url: str, key: str, barrier: Any, results: Any) -> None:
    """The field's old pop: ZRANGEBYSCORE, then ZREM in a second round trip."""
    client = redis.Redis.from_url(url)
    got: list[str] = []
    barrier.wait()
    while True:
        ids = client.zrangebyscore(key, "-inf", time.time() * 1000, start=0, num=BATCH)
        if not ids:
            break
        client.zrem(key, *ids)
        got.extend(i.decode() for i in ids)
    results.put(got)


def _race(worker: Any, args: tuple[Any, ...], processes: int) -> tuple[float, list[str]]:
    barrier = CTX.Barrier(processes + 1)
    results = CTX.Queue()
    procs = [CTX.Process(target=worker, args=(*args, barrier, results)) for _ in range(processes)]
    for p in procs:
        p.start()
    barrier.wait()
    start = time.perf_counter()
    claimed: list[str] = []
    for _ in procs:
        claimed.extend(results.get(timeout=600))
    elapsed = time.perf_counter() - start
    for p in procs:
        p.join()
    return elapsed, claimed


def bench_store(url: str, items: int, processes: int) -> dict[str, Any]:
    store = onceonly.connect(url)
    store.setup()
    name = f"bench-{secrets.token_hex(4)}"
    q = store.queue(name)
    for i in range(items):
        q.put(f"i{i}")
    store.close()
    elapsed, claimed = _race(_claim_worker, (url, name), processes)
    return _result(items, elapsed, claimed)


def bench_naive_redis(url: str, items: int, processes: int) -> dict[str, Any]:
    client = redis.Redis.from_url(url)
    key = f"bench-naive-{secrets.token_hex(4)}"
    client.zadd(key, {f"i{i}": 0 for i in range(items)})
    elapsed, claimed = _race(_naive_redis_worker, (url, key), processes)
    client.delete(key)
    return _result(items, elapsed, claimed)


def _result(items: int, elapsed: float, claimed: list[str]) -> Cell:
    counts = Counter(claimed)
    return {
        "per_second": len(counts) / elapsed,
        "duplicates": sum(c - 1 for c in counts.values()),
        "lost": items - len(counts),
    }


def main() -> int:
    # dynalite ignores credentials, boto3 still wants some: never real ones here.
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ[var] = "bench"
    os.environ.pop("AWS_PROFILE", None)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000, help="items per run (dynalite gets a third)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per cell; the median is reported")
    parser.add_argument("--out", type=Path, help="write the markdown table here")
    args = parser.parse_args()

    servers = LocalServers()
    try:
        endpoint = servers.dynalite()
        urls = {
            "PostgreSQL (onceonly, 1 statement)": servers.postgres(),
            "Redis (onceonly, 1 Lua script)": servers.redis(),
            "DynamoDB/dynalite (onceonly, sharded GSI)": (
                f"dynamodb://bench-{secrets.token_hex(3)}?region=us-east-1&endpoint_url={endpoint}"
            ),
        }
        rows: list[tuple[str, dict[int, dict[str, Any]]]] = []
        for label, url in urls.items():
            n = args.items // 3 if url.startswith("dynamodb") else args.items
            rows.append((label, {p: median_of_runs(lambda u=url, n=n, p=p: bench_store(u, n, p), args.repeat)
                                 for p in PROCESS_COUNTS}))
            print(f"done: {label}", file=sys.stderr)
        redis_url = urls["Redis (onceonly, 1 Lua script)"]
        rows.append(("Redis, old two-step pop (ZRANGEBYSCORE + ZREM)",
                     {p: median_of_runs(lambda p=p: bench_naive_redis(redis_url, args.items, p), args.repeat)
                      for p in PROCESS_COUNTS}))
    finally:
        servers.stop()
    publish(_markdown(rows, args.items), args.out)
    return 0


def _markdown(rows: list[tuple[str, dict[int, Cell]]], items: int) -> str:
    base = rows[0][1][1]["per_second"]
    lines = [
        "| method | " + " | ".join(f"{p} proc claims/s (x PG 1 proc)" for p in PROCESS_COUNTS)
        + " | duplicates (worst run) |",
        "|---|" + "---|" * (len(PROCESS_COUNTS) + 1),
    ]
    for label, cells in rows:
        lines.append(f"| {label} | {ratio_cells(cells, base)} | {worst(cells, 'duplicates')} |")
    lines.append("")
    lines.append(f"{items} items per run (dynalite: {items // 3}), batches of {BATCH}, claim + ack_many, "
                 f"median of runs; {platform.python_version()}, {multiprocessing.cpu_count()} cores.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
