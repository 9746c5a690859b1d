"""Where the time goes when a target is missed: one process runs the store's
claim + ack loop under pyinstrument, at the headline batch size, and the
report keeps the top of its call tree."""

from __future__ import annotations

import sys

from bench.claims import onceonly_subject
from bench.places import Places
from bench.pool import Workers
from bench.sizes import Sizes
from bench.targets import Target

PROFILE_ITEMS = 5000  # at most, per profiled loop
PROFILE_LINES = 40  # of pyinstrument's text tree kept in the report


def run(workers: Workers, places: Places, sizes: Sizes, targets: list[Target]) -> dict[str, str]:
    stores = sorted({t.profile for t in targets if t.met is False and t.profile})
    urls = places.store_urls()
    profiles = {}
    for store in stores:
        batch = sizes.headline_batch
        prepared = onceonly_subject(store, urls[store]).prepare(min(PROFILE_ITEMS, sizes.items[store][batch]), batch)
        result = workers.run(prepared.job, {**prepared.kwargs, "profile": True})
        tree = str(result["profile"]).split("\nProfile at", 1)[-1].splitlines()[1:]  # past pyinstrument's banner
        profiles[store] = "\n".join(line for line in tree[:PROFILE_LINES] if line.strip())
        print(f"profile: {store} done", file=sys.stderr, flush=True)
    return profiles
