"""Round trips per lease operation (acquire, renew, complete, release), per
store, counted in a worker like every other figure."""

from __future__ import annotations

import secrets
import sys
from typing import Any

from bench.places import Places
from bench.pool import Job, Workers
from bench.queue_jobs import Tally
from bench.stores import open_store

OPERATIONS = 20  # of each kind


def lease_trips(url: str) -> Job:
    store = open_store(url)
    store.inspect("warm-up")
    tally = Tally()
    yield
    for i in range(OPERATIONS):
        name = f"lease-{secrets.token_hex(4)}-{i}"
        lease = tally("acquire", store.acquire, name, ttl=60)
        lease = tally("renew", store.renew, lease, ttl=60)
        tally("release", store.release, lease)
        tally("complete", store.complete, store.acquire(name, ttl=60), keep=60)
    store.close()
    return tally.result([])


def run(workers: Workers, places: Places) -> list[dict[str, Any]]:
    runs = []
    for store_kind, url in places.store_urls().items():
        open_store(url).setup()
        result = workers.run("bench.leases:lease_trips", {"url": url})
        runs.append({"section": "leases", "store": store_kind, "calls": result["calls"],
                     "round_trips": result["round_trips"]})
    print("leases done", file=sys.stderr, flush=True)
    return runs
