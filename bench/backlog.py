"""Backlog scaling: what one claim costs with 2k, 20k and 100k items queued,
most of them not yet due. One queue per store grows through the sizes; at
each size a fixed number of due items is put, and one process claims + acks
them in batches and then claims a few times more with nothing due. The claim
latencies (median) are the figure: flat is the goal."""

from __future__ import annotations

import secrets
import statistics
import sys
import time
from collections import Counter
from typing import Any

from bench.explain import claim_plan
from bench.places import Places
from bench.pool import Job, Workers
from bench.queue_jobs import LEASE, Tally
from bench.sizes import Sizes
from bench.stores import fill, open_store

EMPTY_CLAIMS = 20  # claims that find nothing due, timed after the drain
NOT_DUE_FOR = 7 * 86400.0  # seconds: the scheduled items stay out of reach


def probe(url: str, queue: str, batch: int) -> Job:
    store = open_store(url)
    q = store.queue(queue)
    q.claim(limit=1, lease=LEASE)  # nothing is due yet: one real round trip
    tally, ids = Tally(), list[str]()
    drain: list[float] = []
    empty: list[float] = []
    yield
    while True:
        start = time.monotonic()
        claims = tally("claim", q.claim, limit=batch, lease=LEASE)
        drain.append(time.monotonic() - start)
        if not claims:
            break
        ids.extend(c.item_id for c in claims)
        tally("ack", q.ack_many, claims)
    drained = time.monotonic()
    for _ in range(EMPTY_CLAIMS):
        start = time.monotonic()
        tally("claim", q.claim, limit=batch, lease=LEASE)
        empty.append(time.monotonic() - start)
    store.close()
    return tally.result(ids, ended=drained, claim_seconds=drain, empty_seconds=empty)


def run(workers: Workers, places: Places, sizes: Sizes) -> tuple[list[dict[str, Any]], str]:
    """The probes' runs, and the PostgreSQL claim's plan at the largest backlog."""
    runs, plan = [], ""
    for store_kind, url in places.store_urls().items():
        parent = open_store(url)
        parent.setup()
        q = parent.queue(f"backlog-{secrets.token_hex(4)}")
        due = sizes.backlog_due[store_kind]
        scheduled = 0
        for backlog in sizes.backlog[store_kind]:
            more = [f"s{i}" for i in range(scheduled, backlog - due)]
            fill(url, q, more, due_at=time.time() + NOT_DUE_FOR)
            scheduled += len(more)
            for rep in range(sizes.repeat):
                fill(url, q, [f"d{backlog}-{rep}-{i}" for i in range(due)])
                result = workers.run("bench.backlog:probe",
                                     {"url": url, "queue": q.name, "batch": sizes.headline_batch})
                handed = Counter(result["ids"])
                runs.append({
                    "section": "backlog", "store": store_kind, "backlog": backlog, "due": due, "rep": rep,
                    "claim_ms": 1000 * statistics.median(result["claim_seconds"]),
                    "empty_claim_ms": 1000 * statistics.median(result["empty_seconds"]),
                    "per_second": len(handed) / (result["ended"] - result["started"]),
                    "duplicates": sum(c - 1 for c in handed.values()), "lost": due - len(handed),
                    "round_trips": result["round_trips"], "calls": result["calls"],
                })
        if store_kind == "postgresql":
            plan = claim_plan(url, q.name, sizes.headline_batch)
        parent.close()
        print(f"backlog: {store_kind} done", file=sys.stderr, flush=True)
    return runs, plan
