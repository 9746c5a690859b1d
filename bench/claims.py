"""Claim + ack throughput, per store and beside the bare statements and the
field's alternatives, at every batch size and process count: the parent fills
a fresh queue, P workers drain it at once, and the ids they were handed are
checked (duplicates, lost) together with what is left in the queue."""

from __future__ import annotations

import secrets
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import psycopg
import redis

from bench.places import Places
from bench.pool import Workers
from bench.queue_jobs import HERE
from bench.sizes import STORES, Sizes
from bench.stores import fill, open_store
from onceonly_app.sql_queries import load_queries

BARE_SQL = load_queries(HERE / "bare.sql")
ZADD_CHUNK = 5000


@dataclass
class Prepared:
    """One filled queue, ready for a race."""

    job: str
    kwargs: dict[str, Any]  # the same for every worker
    left: Callable[[], int]  # items still in the queue afterwards


@dataclass(frozen=True)
class Subject:
    store: str  # which store's row family it belongs to
    method: str  # "onceonly", "bare", ...
    prepare: Callable[[int, int], Prepared]  # (items, batch) -> a filled queue
    # The grid measured; None: every batch size / process count / the store's item counts.
    batches: tuple[int, ...] | None = None
    processes: tuple[int, ...] | None = None
    items: int | None = None


def _ids(n: int) -> list[str]:
    return [f"i{i}" for i in range(n)]


def onceonly_subject(store: str, url: str) -> Subject:
    parent = open_store(url)
    parent.setup()
    warm = parent.queue(f"warm-{secrets.token_hex(3)}")  # loads Redis scripts before any count
    fill(url, warm, ["w"])
    warm.ack_many(warm.claim(limit=1))

    def prepare(n: int, batch: int) -> Prepared:
        q = parent.queue(f"b{batch}-{secrets.token_hex(4)}")
        fill(url, q, _ids(n))
        return Prepared("bench.queue_jobs:onceonly_claims", {"url": url, "queue": q.name, "batch": batch},
                        lambda: q.depth().total)

    return Subject(store, "onceonly", prepare)


def bare_postgres_subject(url: str) -> Subject:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(BARE_SQL["setup"])

    def prepare(n: int, batch: int) -> Prepared:
        queue = f"b{batch}-{secrets.token_hex(4)}"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(BARE_SQL["fill"], {"queue": queue, "n": n})

        def left() -> int:
            with psycopg.connect(url, autocommit=True) as conn:
                row = conn.execute(BARE_SQL["left"], {"queue": queue}).fetchone()
                return int(row[0]) if row else 0

        return Prepared("bench.queue_jobs:bare_postgres", {"url": url, "queue": queue, "batch": batch}, left)

    return Subject("postgresql", "bare: SKIP LOCKED UPDATE + DELETE", prepare)


def redis_set_subject(places: Places, method: str, job: str, locks: bool = False) -> Subject:
    """The Redis alternatives: all work on a plain sorted set of due ids."""
    client = redis.Redis.from_url(places.redis_server_url)

    def prepare(n: int, batch: int) -> Prepared:
        key = f"{places.redis_prefix}:set:{secrets.token_hex(4)}"
        ids = _ids(n)
        for start in range(0, n, ZADD_CHUNK):
            client.zadd(key, dict.fromkeys(ids[start:start + ZADD_CHUNK], 0))
        kwargs = {"url": places.redis_server_url, "key": key, "batch": batch}
        if locks:
            kwargs["lock_prefix"] = f"{key}:lock"
        return Prepared(job, kwargs, lambda: int(client.zcard(key)))

    return Subject("redis", method, prepare)


def subjects(places: Places, sizes: Sizes) -> list[Subject]:
    """Every claim method, onceonly first in each store's family. onceonly and
    the bare statements run the whole grid; the racy pop runs the headline
    batch (its duplicates grow with processes); the Lock per item, three round
    trips per item, runs the headline cell on fewer items."""
    urls = places.store_urls()
    head = (sizes.headline_batch,)
    racy = redis_set_subject(places, "racy two-step pop (ZRANGEBYSCORE, ZREM)", "bench.queue_jobs:racy_redis")
    lock = redis_set_subject(places, "redis-py Lock per item", "bench.queue_jobs:lock_per_item", locks=True)
    return [
        onceonly_subject("postgresql", urls["postgresql"]),
        bare_postgres_subject(places.postgres_url),
        onceonly_subject("redis", urls["redis"]),
        redis_set_subject(places, "bare: one-script pop, no lease", "bench.queue_jobs:bare_redis"),
        replace(racy, batches=head, processes=sizes.racy_processes),
        replace(lock, batches=head, processes=(sizes.headline_processes,), items=sizes.lock_items),
        onceonly_subject("dynamodb", urls["dynamodb"]),
    ]


def cells(subject: Subject, sizes: Sizes) -> Iterator[tuple[int, int, int]]:
    """(batch, processes, items) of every cell measured for a subject."""
    for batch in subject.batches or sizes.batches:
        for processes in subject.processes or sizes.processes:
            yield batch, processes, subject.items or sizes.items[subject.store][batch]


def measure(workers: Workers, subject: Subject, batch: int, processes: int, n: int, rep: int) -> dict[str, Any]:
    prepared = subject.prepare(n, batch)
    race = workers.race(prepared.job, [prepared.kwargs] * processes)
    handed = Counter(i for r in race.results for i in r["ids"])
    calls: Counter[str] = Counter()
    round_trips: Counter[str] = Counter()
    for r in race.results:
        calls.update(r["calls"])
        round_trips.update(r["round_trips"])
    return {
        "section": "claims", "store": subject.store, "method": subject.method, "batch": batch,
        "processes": processes, "rep": rep, "items": n, "elapsed": race.elapsed,
        "per_second": len(handed) / race.elapsed,
        "duplicates": sum(c - 1 for c in handed.values()), "duplicated_items": sum(c > 1 for c in handed.values()),
        "lost": n - len(handed), "left": prepared.left(),
        "overlapped": processes == 1 or race.overlapped,
        "calls": dict(calls), "round_trips": dict(round_trips),
        "acks_on_claim": any(r.get("acks_on_claim") for r in race.results),
        "refused_acks": sum(r.get("refused_acks", 0) for r in race.results),
    }


def run(workers: Workers, places: Places, sizes: Sizes) -> list[dict[str, Any]]:
    """Per store, each repetition sweeps every cell, and the methods of one cell
    run back to back: a ratio compares runs a few seconds apart, not minutes,
    on a machine whose load drifts."""
    plan = [(subject, cell) for subject in subjects(places, sizes) for cell in cells(subject, sizes)]
    runs = []
    for store in STORES:
        ordered = sorted(((s, c) for s, c in plan if s.store == store), key=lambda sc: sc[1][:2])
        for rep in range(sizes.repeat):
            for subject, (batch, processes, n) in ordered:
                runs.append(measure(workers, subject, batch, processes, n, rep))
                print(f"claims: {subject.store} / {subject.method}, batch {batch}, {processes} proc: "
                      f"{runs[-1]['per_second']:,.0f} items/s (run {rep + 1})", file=sys.stderr, flush=True)
    return runs
