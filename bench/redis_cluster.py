"""Claims/s on a Redis Cluster against one Redis node, side by side in one run:

    .venv/bin/python -m bench.redis_cluster --out docs/

A local cluster (3 primaries, 3 replicas, onceonly_cli/testing/redis_cluster.py) and a
single redis-server are started on loopback. For 1, 4 and 16 queues (names
picked so that the queues spread evenly over the cluster's primaries), the
same items are put, then WORKERS processes (each connected before one barrier)
drain every queue with ``claim(limit=BATCH, acks=previous)``; claims/s = items
handed out / wall time. Duplicates and lost items are counted. The result
replaces the "Redis Cluster" section of OUT/benchmarks.md (kept by the full
``python -m bench`` run) and goes to OUT/benchmarks-redis-cluster.json."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import secrets
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import onceonly
from bench.marked_sections import MarkedSection
from onceonly_cli.testing.servers import LocalServers

QUEUE_COUNTS = (1, 4, 16)
ITEMS = 12_000
WORKERS = 6
BATCH = 25
REPEAT = 3
BEGIN, END = "<!-- redis-cluster:begin -->", "<!-- redis-cluster:end -->"
CTX = multiprocessing.get_context("spawn")


def _drain(n: int, barrier: Any, url: str, queues: list[str], results: Any) -> None:
    store = onceonly.connect(url)
    mine = [store.queue(name) for name in queues[n % len(queues):] + queues[:n % len(queues)]]
    for q in mine:
        q.depth()  # connected to every node this worker will use
    barrier.wait()
    ids: list[str] = []
    pending: dict[str, list[onceonly.Claim]] = {q.name: [] for q in mine}
    while mine:
        for q in list(mine):
            claims = q.claim(limit=BATCH, lease=60, acks=pending[q.name])
            pending[q.name] = list(claims)
            ids.extend(c.item_id for c in claims)
            if not claims:
                mine.remove(q)
    results.put((ids, time.monotonic()))
    store.close()


def _spread_names(url: str, count: int) -> list[str]:
    """``count`` queue names whose slots cycle over the cluster's primaries
    (on one node: any names)."""
    import redis

    if "cluster=1" not in url:
        return [f"q{i}-{secrets.token_hex(3)}" for i in range(count)]
    with redis.RedisCluster.from_url(url.split("?")[0]) as client:
        primaries = sorted(node.name for node in client.get_primaries())
        names: list[str] = []
        while len(names) < count:
            name = f"q{len(names)}-{secrets.token_hex(3)}"
            # the hash tag alone picks the slot, whatever the prefix
            owner = client.nodes_manager.get_node_from_slot(client.keyslot(f"{{q:{name}}}")).name
            if owner == primaries[len(names) % len(primaries)]:
                names.append(name)
    return names


def measure_once(url: str, queue_count: int) -> dict[str, Any]:
    names = _spread_names(url, queue_count)
    url = f"{url}{'&' if '?' in url else '?'}prefix=bench-{secrets.token_hex(3)}"
    store = onceonly.connect(url)
    items = [f"i{i}" for i in range(ITEMS)]
    for k, name in enumerate(names):
        store.queue(name).put_many((item, None, None) for item in items[k::queue_count])
    barrier, results = CTX.Barrier(WORKERS + 1), CTX.Queue()
    procs = [CTX.Process(target=_drain, args=(n, barrier, url, names, results)) for n in range(WORKERS)]
    for proc in procs:
        proc.start()
    barrier.wait()
    started = time.monotonic()
    finished = [results.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    seconds = max(ended for _, ended in finished) - started
    handed = Counter(item for ids, _ in finished for item in ids)
    left = sum(store.queue(name).depth().total for name in names)
    store.close()
    return {"claims_per_s": sum(handed.values()) / seconds, "duplicates": sum(c - 1 for c in handed.values() if c > 1),
            "lost": len(set(items) - set(handed)), "left": left}


def measure(url: str, queue_count: int) -> dict[str, Any]:
    runs = [measure_once(url, queue_count) for _ in range(REPEAT)]
    rates = [r["claims_per_s"] for r in runs]
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates),
            "duplicates": max(r["duplicates"] for r in runs), "lost": max(r["lost"] for r in runs),
            "left": max(r["left"] for r in runs)}


def section(result: dict[str, Any]) -> str:
    rows = []
    for q in QUEUE_COUNTS:
        one, cluster = result["one_node"][str(q)], result["cluster"][str(q)]
        rows.append(f"| {q} | {one['median']:,.0f} ({one['min']:,.0f}-{one['max']:,.0f}) "
                    f"| {cluster['median']:,.0f} ({cluster['min']:,.0f}-{cluster['max']:,.0f}) "
                    f"| {cluster['median'] / one['median']:.2f}x "
                    f"| {one['duplicates'] + cluster['duplicates']} / {one['lost'] + cluster['lost']} / "
                    f"{one['left'] + cluster['left']} |")
    return "\n".join([
        BEGIN,
        "## Redis Cluster against one node",
        "",
        f"Generated by `python -m bench.redis_cluster` on {result['when']}, in {result['minutes']:.1f} minutes, "
        f"on the machine above (load average {result['load'][0]:.1f} at the start). One run, side by side: "
        f"a single redis-server and a local Redis Cluster (3 primaries, 3 replicas; "
        f"onceonly_cli/testing/redis_cluster.py), "
        f"both on 127.0.0.1. {ITEMS:,} items spread over Q queues (on the cluster, names picked so the queues "
        f"cycle over the 3 primaries), drained by {WORKERS} processes with `claim(limit={BATCH}, acks=previous)`, "
        f"each process going round its queues. Median of {REPEAT} runs, min-max in brackets.",
        "",
        "| queues | one node claims/s | cluster claims/s | cluster / one node | duplicates / lost / left (worst) |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "What it shows, and where the ceilings are:",
        "",
        "- **One queue is one slot, so one primary.** Its two keys share a hash tag, so every claim of a queue runs "
        "on the one primary that owns the slot, on that primary's single command thread: one queue's ceiling on a "
        "cluster is one node's, whatever the number of shards. Here the 1-queue row shows that ceiling (plus the "
        "cluster client's routing). At the load this run saw, the spread between runs is wide: read each row "
        "with its min-max.",
        "- **Many queues spread over the primaries.** With 4 and 16 queues the claims go to all three primaries. "
        "On this 2-core machine the primaries, their replicas and the workers share the same two cores, so the "
        "cluster cannot run faster than one node here; on ElastiCache or MemoryDB each primary is its own "
        "machine, and the queues' throughput adds up across shards.",
        "- **Spreading a hot queue:** split it into N queues by a hash of the item id (`jobs-0` … `jobs-7`), "
        "put each item in its queue, and let each worker go round the N queues (as the workers here do). Names "
        "land on slots by hash; with few queues, pick names that land on different primaries (`CLUSTER KEYSLOT`).",
        "- Every run handed out each item exactly once: the duplicates / lost / left column is the worst run's.",
        END,
    ])


_SECTION = MarkedSection(BEGIN, END)
replace_section = _SECTION.replace  # the Redis Cluster section of docs/benchmarks.md
kept_section = _SECTION.kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.redis_cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs"), help="where to write (default: docs/)")
    args = parser.parse_args(argv)
    started, load = time.monotonic(), os.getloadavg()
    servers = LocalServers()
    try:
        one_node = servers.redis(own=True)
        cluster = servers.redis_cluster().url
        result: dict[str, Any] = {"one_node": {}, "cluster": {}}
        for q in QUEUE_COUNTS:  # interleaved: both see the same machine load
            result["one_node"][str(q)] = measure(one_node, q)
            result["cluster"][str(q)] = measure(cluster, q)
    finally:
        servers.stop()
    result.update(when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), load=load,
                  minutes=(time.monotonic() - started) / 60)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "benchmarks-redis-cluster.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    page = args.out / "benchmarks.md"
    page.write_text(replace_section(page.read_text(encoding="utf-8") if page.exists() else "", section(result)),
                    encoding="utf-8")
    print(f"wrote the Redis Cluster section of {page}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
