"""The benchmark suite, one command:

    .venv/bin/python -m bench --out docs/        # full run (under 15 minutes on 2 cores)
    .venv/bin/python -m bench --smoke --out DIR  # tiny sizes, one repetition (CI)
    .venv/bin/python -m bench.redis_cluster --out docs/  # Redis Cluster against one node (its own section)
    .venv/bin/python -m bench.admission --out docs/      # endpoint admission, scan against semaphore (own section)

Writes DIR/benchmarks.md (tables, charts, targets), DIR/benchmarks.json (every
run's raw figures) and DIR/bench-*.png. Needs the bench extra:
pip install -e . -e ./app -e './cli[bench]'."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench import (
    admission,
    backlog,
    charts,
    claims,
    cold_imports,
    delivery_cost,
    idempotency,
    leases,
    machine,
    procrastinate_jobs,
    profiles,
    redis_cluster,
    replicas,
)
from bench.places import scratch_places, use_local_credentials
from bench.pool import Workers
from bench.report import Report
from bench.sizes import FULL, SMOKE, Sizes
from bench.targets import Target, evaluate


def measure(sizes: Sizes) -> tuple[dict[str, Any], list[Target]]:
    """Every section in turn, on one set of servers and one pool of workers."""
    started = time.monotonic()
    use_local_credentials()  # before the workers start: they inherit the environment
    workers = Workers(max(*sizes.processes, *sizes.racy_processes, *sizes.idempotency_processes))
    seconds: dict[str, float] = {}

    def timed(section: str, work: Callable[[], Any]) -> Any:
        start = time.monotonic()
        try:
            return work()
        finally:
            seconds[section] = round(time.monotonic() - start, 1)

    try:
        with scratch_places() as places:
            result: dict[str, Any] = {"machine": machine.describe(places), "sizes": sizes.as_json()}
            runs = timed("claims", lambda: claims.run(workers, places, sizes))
            runs += timed("leases", lambda: leases.run(workers, places))
            backlog_runs, plan = timed("backlog", lambda: backlog.run(workers, places, sizes))
            runs += backlog_runs
            runs += timed("procrastinate", lambda: procrastinate_jobs.run(workers, places, sizes))
            runs += timed("idempotency", lambda: idempotency.run(workers, places, sizes))
            runs += timed("replicas", lambda: replicas.run(places, sizes))
            runs += timed("delivery_cost", lambda: delivery_cost.run(places, sizes))
            if sizes.repeat > 1:  # a layer build and 70 imports: not in the smoke run
                runs += timed("cold_imports", lambda: cold_imports.run(cold_imports.REPEAT))
            targets = evaluate(runs, sizes)
            result.update(runs=runs, targets=[asdict(t) for t in targets], postgresql_claim_plan=plan,
                          profiles=timed("profiles", lambda: profiles.run(workers, places, sizes, targets)))
    finally:
        workers.close()
    result.update(load_average_end=os.getloadavg(), duration_minutes=(time.monotonic() - started) / 60,
                  section_seconds=seconds)
    return result, targets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs"), help="where to write (default: docs/)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repetition: checks the suite runs")
    args = parser.parse_args(argv)
    # A stopped run still removes its scratch database, prefix and servers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sizes = SMOKE if args.smoke else FULL
    args.out.mkdir(parents=True, exist_ok=True)
    result, targets = measure(sizes)
    result["command"] = "python -m bench" + (" --smoke" if args.smoke else "") + f" --out {shlex.quote(str(args.out))}"
    result["charts"] = charts.draw(result["runs"], sizes, args.out)
    (args.out / "benchmarks.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    page = args.out / "benchmarks.md"
    # The Redis Cluster, endpoint admission and cost floor sections come from their
    # own commands (bench/redis_cluster.py, bench/admission.py, bench.delivery_cost
    # --floor): kept as they were.
    earlier = page.read_text(encoding="utf-8") if page.exists() else ""
    markdown = Report(result, sizes, targets).markdown()
    for own in (redis_cluster, admission, delivery_cost):
        kept = own.kept_section(earlier)
        if kept:
            markdown = own.replace_section(markdown, kept)
    page.write_text(markdown, encoding="utf-8")
    print(f"wrote {args.out / 'benchmarks.md'} in {result['duration_minutes']:.1f} min", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
