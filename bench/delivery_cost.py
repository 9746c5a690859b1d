"""Cost per delivery: the real dispatch handler (functions/webhook_dispatch)
sending serially (WEBHOOK_MAX_IN_FLIGHT=1) against concurrently (the default,
10), side by side in one run.

Each replica is a process holding the handler warm, like a Lambda container,
and serving SQS batches of 10 records back to back (after one warm-up batch:
a container's first invocation builds the service and grows its connection
pools; it is timed and reported apart, and checked like the others); each record is a new event
for its own subscription, POSTed to a local receiver on 127.0.0.1 that answers
after 50, 200 or 1,000 ms. Lambda bills an invocation's wall time, so
Lambda-seconds per delivery = the invocations' summed duration / deliveries,
and a replica's deliveries/s is its inverse. Replica scaling: P replicas at
once on the 200 ms receiver, each with its own batches. Every run checks that
each delivery was received and answered 2xx exactly once.

Alone (a few minutes, tiny sizes): ``python -m bench.delivery_cost``, which
prints the section of docs/benchmarks.md it measured. ``--floor BATCHES``: the
cost floor alone (one replica, 200 and 50 ms), which writes its own section of
docs/benchmarks.md, kept by the full run."""

from __future__ import annotations

import json
import multiprocessing
import os
import secrets
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

import onceonly
from bench.machine import commit as machine_commit
from bench.marked_sections import MarkedSection
from bench.places import Places
from bench.sizes import Sizes
from onceonly_app.db.migrate import migrate
from onceonly_app.webhooks.signing import new_secret
from onceonly_cli.local.project import project_root
from onceonly_cli.testing.receiver import Behaviour, WebhookReceiver

MODES = {"serial": 1, "concurrent": 10}  # WEBHOOK_MAX_IN_FLIGHT
BATCH = 10  # records per SQS batch: the template's BatchSize
SCALING_LATENCY = 0.2
TENANT = "bench-tenant"
CTX = multiprocessing.get_context("spawn")
INSERT_SUBSCRIPTION = "INSERT INTO webhook_subscriptions (id, tenant_id, url, secret) VALUES (%s, %s, %s, %s)"
RUN_TIMEOUT = 300.0
STATUSES = "SELECT status, count(*) FROM webhook_deliveries WHERE webhook_id = ANY(%s) GROUP BY status"


def _env(places: Places, latency: float, in_flight: int) -> dict[str, str]:
    return {"DATABASE_URL": places.postgres_url, "ONCEONLY_STORE_URL": places.postgres_url,
            "WEBHOOK_QUEUE": f"bench-{secrets.token_hex(4)}", "WEBHOOK_ALLOW_HTTP_HOSTS": "127.0.0.1",
            # Timeouts far above the latency: on a loaded machine an attempt cut
            # short would be the retry function's work, not this measurement's.
            "WEBHOOK_CONNECT_TIMEOUT_SECONDS": "5", "WEBHOOK_READ_TIMEOUT_SECONDS": str(latency * 10 + 10),
            "WEBHOOK_CLAIM_BATCH": "1", "WEBHOOK_ATTEMPT_LEASE_SECONDS": "600",  # no retry function runs here
            "WEBHOOK_MAX_IN_FLIGHT": str(in_flight), "WEBHOOK_DEADLINE_MARGIN_SECONDS": "1",
            "POWERTOOLS_LOG_LEVEL": "WARNING", "POWERTOOLS_METRICS_NAMESPACE": "onceonly-bench"}


def _replica(env: dict[str, str], batches: list[dict[str, Any]], barrier: Any, results: Any) -> None:
    """One warm container: load the handler and open its clients, wait for the
    others, then invoke it on each batch in turn, timing each invocation."""
    os.environ.update(env)
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - Powertools' EMF metrics, not wanted here
    from onceonly_app.db import clients
    from onceonly_cli.local.lambda_runtime import LambdaContext, load_handler

    handler = load_handler(project_root() / "functions" / "webhook_dispatch", "app.handler")
    clients.coordination_store().queue(env["WEBHOOK_QUEUE"]).depth()  # one round trip each, before the barrier
    with clients.db_pool().connection() as conn:
        conn.execute("SELECT 1")
    # The container's first invocation builds the service (its TLS context) and
    # grows the connection pools: timed, reported apart, and not in the figures.
    warmup, *batches = batches
    started = time.monotonic()
    failures = len(handler(warmup, LambdaContext("webhook-dispatch", timeout_seconds=60))["batchItemFailures"])
    first = time.monotonic() - started
    barrier.wait(RUN_TIMEOUT)
    durations = []
    cpu_started = time.process_time()  # every thread of this process: the handler's own CPU
    for event in batches:
        started = time.monotonic()
        response = handler(event, LambdaContext("webhook-dispatch", timeout_seconds=60))
        durations.append(time.monotonic() - started)
        failures += len(response["batchItemFailures"])
    results.put({"durations": durations, "failures": failures, "cpu": time.process_time() - cpu_started,
                 "first": first})


def _batches(places: Places, receiver: WebhookReceiver, latency: float, count: int) -> list[dict[str, Any]]:
    """``count`` SQS batches, each record a new event for a subscription of its own."""
    template = json.loads((project_root() / "events" / "webhook_dispatch.json").read_text())["Records"][0]
    batches = []
    with psycopg.connect(places.postgres_url, autocommit=True) as conn:
        for _ in range(count):
            records = []
            for _ in range(BATCH):
                webhook_id, secret = f"wh-bench-{secrets.token_hex(6)}", new_secret()
                url = receiver.endpoint(webhook_id, secret, Behaviour(latency=latency))
                conn.execute(INSERT_SUBSCRIPTION, (webhook_id, TENANT, url, secret))
                body = json.dumps({"webhook_id": webhook_id, "tenant_id": TENANT, "event_id": f"evt-{uuid.uuid4()}",
                                   "event_type": "invoice.paid", "payload": {"invoice_id": "inv-b", "amount": 4200}})
                records.append({**template, "messageId": str(uuid.uuid4()), "body": body})
            batches.append({"Records": records})
    return batches


def measure(places: Places, latency: float, mode: str, replicas: int, batches: int) -> dict[str, Any]:
    """One run: ``replicas`` processes, ``batches`` batches each."""
    with WebhookReceiver(quiet=True) as receiver:
        per_replica = [_batches(places, receiver, latency, batches + 1) for _ in range(replicas)]  # + the warm-up
        env = _env(places, latency, MODES[mode])
        barrier, results = CTX.Barrier(replicas), CTX.Queue()
        procs = [CTX.Process(target=_replica, args=(env, mine, barrier, results)) for mine in per_replica]
        for proc in procs:
            proc.start()
        try:
            reports = [results.get(timeout=RUN_TIMEOUT) for _ in procs]
        finally:
            for proc in procs:
                proc.join(RUN_TIMEOUT)
        accepted = receiver.successes()
    statuses = _statuses(places, [json.loads(r["body"])["webhook_id"] for mine in per_replica for b in mine
                                  for r in b["Records"]])
    deliveries = replicas * batches * BATCH  # the warm-up batches' are checked, not counted
    lambda_seconds = sum(sum(r["durations"]) for r in reports)
    wall = max(sum(r["durations"]) for r in reports)  # the replicas ran at once
    return {
        "section": "delivery_cost", "latency_ms": round(latency * 1000), "mode": mode, "replicas": replicas,
        "items": deliveries, "lambda_seconds_per_delivery": lambda_seconds / deliveries,
        "per_second": deliveries / lambda_seconds,  # per replica: its deliveries over the time it was invoked
        "total_per_second": deliveries / wall,
        "invocation_ms": 1000 * lambda_seconds / (replicas * batches),
        # Billed time over the receiver's own: 1.0 would be an invocation that only waits for the POSTs.
        "over_receiver": lambda_seconds / (replicas * batches) / latency,
        "cpu_ms_per_delivery": 1000 * sum(r["cpu"] for r in reports) / deliveries,
        "first_invocation_ms": 1000 * max(r["first"] for r in reports),  # a container's first batch, not counted
        # Left for the retry function: a first attempt that did not succeed (none expected).
        "not_yet_delivered": deliveries + replicas * BATCH - statuses.get("succeeded", 0),
        "duplicates": sum(n - 1 for n in accepted.values() if n > 1),
        "exactly_once": statuses.get("succeeded", 0) == len(accepted) and set(accepted.values()) <= {1}
        and not any(r["failures"] for r in reports),
    }


def _statuses(places: Places, webhook_ids: list[str]) -> dict[str, int]:
    with psycopg.connect(places.postgres_url) as conn:
        rows = conn.execute(STATUSES, (webhook_ids,)).fetchall()
    return {status: count for status, count in rows}


def run(places: Places, sizes: Sizes) -> list[dict[str, Any]]:
    migrate(places.postgres_url)  # the domain tables, and the PostgreSQL store's own
    store = onceonly.connect(places.postgres_url)
    try:
        store.setup()
    finally:
        store.close()
    runs = []
    for rep in range(sizes.repeat):
        for latency, batches in sizes.delivery_batches.items():  # serial and concurrent side by side
            for mode in MODES:
                runs.append({**measure(places, latency, mode, 1, batches), "rep": rep})
        for replicas in sizes.delivery_replicas:
            if replicas == 1:
                continue  # measured above, at the same latency
            for mode in MODES:
                runs.append({**measure(places, SCALING_LATENCY, mode, replicas,
                                       sizes.delivery_batches[SCALING_LATENCY]), "rep": rep})
        print(f"delivery cost: run {rep + 1} done", file=sys.stderr, flush=True)
    return runs


FLOOR_LATENCIES = (0.2, 0.05)
# The cost floor's targets at batch 10: billed time over the receiver's, and
# the handler's CPU per delivery at half of the path's before the batched
# store work (5.2-5.5 ms, the BEFORE line below).
FLOOR_TARGETS = {200: 1.15, 50: 1.6}
CPU_TARGET_MS = 2.7
BEFORE = ("before the batched store work (commit 0026a9a, the code of a07da23 with this bench's columns; "
          "2026-12-02 13:02 UTC, load average 1.3, every invocation counted, the first one too): 200 ms receiver "
          "270 and 259 ms per invocation, 1.35x and 1.30x; 50 ms receiver 112 and 108 ms, 2.25x and 2.15x; "
          "CPU 5.2-5.5 ms per delivery")
FLOOR_BEGIN, FLOOR_END = "<!-- cost-floor:begin -->", "<!-- cost-floor:end -->"
# The main job with one environment per function and a 200 ms receiver, end to end.
SIMULATE_TARGET = 20.0  # deliveries/s
SIMULATE_ARGS = ("--replicas", "1", "--receiver-latency", "0.2", "--failure-rate", "0", "--crash-rate", "0")
SIMULATE_TIMEOUT = 300  # seconds for one simulate run


def floor(places: Places, batches: int, repeat: int) -> list[dict[str, Any]]:
    """The cost floor alone: one warm replica sending concurrently, batches of
    10, billed time over the receiver's and the handler's CPU per delivery;
    the runs alternate latencies, so noise hits both."""
    migrate(places.postgres_url)
    store = onceonly.connect(places.postgres_url)
    try:
        store.setup()
    finally:
        store.close()
    runs = []
    for rep in range(repeat):
        for latency in FLOOR_LATENCIES:
            runs.append({**measure(places, latency, "concurrent", 1, batches), "rep": rep + 1})
            print(_floor_row(runs[-1]), file=sys.stderr, flush=True)
    return runs


def simulate_one_replica(places: Places, repeat: int) -> list[dict[str, Any]]:
    """``onceonly simulate`` with SIMULATE_ARGS, ``repeat`` times: the rate it
    prints (the whole run's), the --events deliveries' own rate and its verdict."""
    command = [sys.executable, "-m", "onceonly_cli.main", "simulate", "--database", places.postgres_server_url,
               *SIMULATE_ARGS, "--json"]
    runs = []
    for rep in range(repeat):
        done = subprocess.run([*command, "--seed", str(rep + 1)], capture_output=True, text=True,
                              timeout=SIMULATE_TIMEOUT, check=False)
        try:
            report = json.loads(done.stdout)
        except json.JSONDecodeError as exc:
            raise RuntimeError(f"onceonly simulate failed (exit {done.returncode}): {done.stderr[-2000:]}") from exc
        runs.append({"rep": rep + 1, "ok": bool(report["ok"]), "run": report["throughput_per_second"],
                     "ordinary": report["ordinary_deliveries"]["per_second"],
                     "deferred": int(report["metrics"].get("deliveries_deferred", 0))})
        print(f"| simulate | {rep + 1} | {runs[-1]['run']} | {runs[-1]['ordinary']} |", file=sys.stderr, flush=True)
    return runs


def _floor_row(r: dict[str, Any]) -> str:
    ok = r["exactly_once"] and not r["not_yet_delivered"]
    counted = r["items"] // BATCH
    with_first = (r["invocation_ms"] * counted + r["first_invocation_ms"]) / (counted + 1) / r["latency_ms"]
    return (f"| {r['latency_ms']} ms | {r['rep']} | {r['invocation_ms']:.0f} | {r['over_receiver']:.2f}x | "
            f"{r['first_invocation_ms']:.0f} | {with_first:.2f}x | {r['cpu_ms_per_delivery']:.1f} | "
            f"{'yes' if ok else '**NO**'} |")


def floor_section(runs: list[dict[str, Any]], simulated: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The cost floor's section of docs/benchmarks.md."""
    verdicts = []
    for latency_ms, target in FLOOR_TARGETS.items():
        ratios = [r["over_receiver"] for r in runs if r["latency_ms"] == latency_ms]
        verdicts.append(f"| billed time at a {latency_ms} ms receiver <= {target}x its latency | " + (
            f"{min(ratios):.2f}-{max(ratios):.2f}x | {'met' if max(ratios) <= target else '**MISSED**'} |"
            if ratios else "not measured | **MISSED** |"))
    cpu = [r["cpu_ms_per_delivery"] for r in runs]
    verdicts.append(f"| handler CPU per delivery <= {CPU_TARGET_MS} ms (half of 5.2-5.5 before) | "
                    f"{min(cpu):.1f}-{max(cpu):.1f} ms | {'met' if max(cpu) <= CPU_TARGET_MS else '**MISSED**'} |")
    every_once = all(r["exactly_once"] and not r["not_yet_delivered"] for r in runs)
    whole, ordinary = [r["run"] for r in simulated], [r["ordinary"] for r in simulated]
    held = all(r["ok"] for r in simulated)
    if simulated:
        verdicts.append(f"| `onceonly simulate {' '.join(SIMULATE_ARGS)}` >= {SIMULATE_TARGET:g} deliveries/s, every "
                        f"invariant held | whole run {min(whole):.1f}-{max(whole):.1f}/s; the --events deliveries "
                        f"alone {min(ordinary):.1f}-{max(ordinary):.1f}/s (median {statistics.median(ordinary):.1f}); "
                        f"invariants held in {sum(r['ok'] for r in simulated)} of {len(simulated)} runs | "
                        + ("met" if held and min(whole) >= SIMULATE_TARGET else "**MISSED**") + " |")
    return "\n".join([
        FLOOR_BEGIN,
        "### The cost floor: billed time over the receiver's (measured alone)",
        "",
        f"Generated by `{meta['command']}` on {meta['when']} (commit {meta['commit']}), in {meta['minutes']:.1f} "
        f"minutes, load average {meta['load'][0]:.1f} at the start and {meta['load_end'][0]:.1f} at the end. One "
        "warm replica of the real dispatch handler (functions/webhook_dispatch) sending concurrently "
        f"(`WEBHOOK_MAX_IN_FLIGHT=10`), {meta['batches']} SQS batches of 10 per run, each record a new event for a "
        "subscription of its own, on PostgreSQL (domain database and coordination store), to a receiver on "
        "127.0.0.1 in another process. Each replica first serves one warm-up batch: a container's first invocation "
        "builds the service (its TLS context) and grows its connection pools; it is timed (\"first invocation\") "
        "and checked, and counted only in the column that says so (the figures before were taken that way, "
        "over 8 batches). \"x receiver\" is the mean billed time of an invocation over the receiver's latency "
        "(1.00x: an invocation that only waits for its POSTs); CPU per delivery is the replica process's CPU time "
        "(every thread) over its deliveries. The runs alternate 200 and 50 ms. The targets are judged on the "
        "warm invocations: a container serves many.",
        "",
        "| receiver | run | ms per invocation | x receiver | first invocation ms | x receiver, the first counted "
        "too | CPU ms per delivery | exactly-once |",
        "|---|---|---|---|---|---|---|---|",
        *(_floor_row(r) for r in runs),
        "",
        "| target (batch 10) | measured | verdict |",
        "|---|---|---|",
        *verdicts,
        "",
        f"Every delivery was received and answered 2xx exactly once in every run: {'yes' if every_once else '**NO**'}. "
        f"Measured {BEFORE}.",
        "",
        f"`onceonly simulate {' '.join(SIMULATE_ARGS)}` (seeds 1 to {len(simulated)}, after the runs above) is the "
        "main job end to end: the real handlers, SQS duplicates, the cron jobs and the hostile endpoints; its own "
        "report judges every invariant. As on Lambda, each function has its own execution environment (one, "
        "with `--replicas 1`; docs/local.md): the dispatcher's batches never queue behind a retry run or a cron "
        "tick. The target is judged on the rate the command prints, the whole run's: every delivery, the "
        "scenarios' too, over the run. The --events deliveries' own rate runs from the first one fed to the last "
        "one's first 2xx, in the one dispatch environment: two of its batches each wait 1.8 s for the trickling "
        "endpoint's attempt deadline (a batch ends with its slowest request), and the capped endpoints' held-back "
        "deliveries arrive with the retry runs, so the last of them sets the span's end.",
        "",
        "| run | whole run, deliveries/s | --events deliveries, deliveries/s | held back (deferred) | invariants |",
        "|---|---|---|---|---|",
        *(f"| {r['rep']} | {r['run']} | {r['ordinary']} | {r['deferred']} | {'held' if r['ok'] else '**BROKEN**'} |"
          for r in simulated),
        "",
        "What an invocation pays for now, per SQS batch: phase 1 (one INSERT that also reads the subscriptions "
        "and their limits, the safety nets in one `put_many`, the attempts' start in one statement) while a "
        "worker thread admits the batch's first requests together (one `take_permits`, one `take_rate_tokens`); "
        "the requests, each signed and checked by the SSRF guard on its own worker; phase 3 (the outcomes in one "
        "statement, the queue items in one `cancel_many`) while the permits go back in one `return_permits` on "
        "the container's returns thread. The store work went from about 8 round trips per record to 5 per batch. "
        "What is left is mostly the interpreter: ten requests' pre-POST work runs on one GIL, so the tenth POST "
        "starts a few milliseconds after the first (docs/webhooks.md, \"Admitted together\").",
        FLOOR_END,
    ])


_FLOOR = MarkedSection(FLOOR_BEGIN, FLOOR_END)
replace_section = _FLOOR.replace  # the cost floor's section of docs/benchmarks.md
kept_section = _FLOOR.kept


def main(argv: list[str] | None = None) -> None:
    import argparse
    from dataclasses import replace

    from bench.places import scratch_places
    from bench.report import Report
    from bench.sizes import FULL
    from bench.targets import _Judge

    parser = argparse.ArgumentParser(prog="python -m bench.delivery_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs per figure (default 1: a few minutes)")
    parser.add_argument("--floor", type=int, metavar="BATCHES",
                        help="only the cost floor: BATCHES batches of 10 per run at 200 and 50 ms, concurrent; "
                             "writes its section of docs/benchmarks.md (--out)")
    parser.add_argument("--out", type=Path, default=Path("docs"), help="with --floor: where to write (default: docs/)")
    args = parser.parse_args(argv)
    sizes = replace(FULL, repeat=args.repeat)
    started, load = time.monotonic(), os.getloadavg()
    if args.floor:
        with scratch_places() as places:
            runs = floor(places, args.floor, args.repeat)
            simulated = simulate_one_replica(places, args.repeat)
        meta = {"command": f"python -m bench.delivery_cost --floor {args.floor} --repeat {args.repeat}",
                "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": machine_commit(),
                "minutes": (time.monotonic() - started) / 60, "load": load, "load_end": os.getloadavg(),
                "batches": args.floor}
        page = args.out / "benchmarks.md"
        page.write_text(replace_section(page.read_text(encoding="utf-8") if page.exists() else "",
                                        floor_section(runs, simulated, meta)), encoding="utf-8")
        print(f"wrote the cost floor section of {page}", file=sys.stderr)
        return
    with scratch_places() as places:
        runs = run(places, sizes)
    report = Report({"runs": runs}, sizes, [_Judge(runs, sizes).delivery_cost()])
    print("\n".join([*report.delivery_cost(), *report.targets_table()]))
    print(f"({(time.monotonic() - started) / 60:.1f} min, {sizes.repeat} run(s) per figure, load average "
          f"{os.getloadavg()[0]:.1f} at the end)")


if __name__ == "__main__":
    main()
