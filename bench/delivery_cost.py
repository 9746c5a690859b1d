"""Cost per delivery: the real dispatch handler (functions/webhook_dispatch)
sending serially (WEBHOOK_MAX_IN_FLIGHT=1) against concurrently (the default,
10), side by side in one run.

Each replica is a process holding the handler warm, like a Lambda container,
and serving SQS batches of 10 records back to back; each record is a new event
for its own subscription, POSTed to a local receiver on 127.0.0.1 that answers
after 50, 200 or 1,000 ms. Lambda bills an invocation's wall time, so
Lambda-seconds per delivery = the invocations' summed duration / deliveries,
and a replica's deliveries/s is its inverse. Replica scaling: P replicas at
once on the 200 ms receiver, each with its own batches. Every run checks that
each delivery was received and answered 2xx exactly once.

Alone (a few minutes, tiny sizes): ``python -m bench.delivery_cost``, which
prints the section of docs/benchmarks.md it measured."""

from __future__ import annotations

import json
import multiprocessing
import os
import secrets
import sys
import time
import uuid
from typing import Any

import psycopg

import onceonly
from bench.places import Places
from bench.sizes import Sizes
from onceonly_app.appdb.migrate import migrate
from onceonly_app.webhooks.signing import new_secret
from onceonly_cli.receiver import Behaviour, WebhookReceiver
from onceonly_cli.servers import REPO_ROOT

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
            "WEBHOOK_CONNECT_TIMEOUT": "5", "WEBHOOK_READ_TIMEOUT": str(latency * 10 + 10),
            "WEBHOOK_CLAIM_BATCH": "1", "WEBHOOK_ATTEMPT_LEASE": "600",  # no retry function runs here
            "WEBHOOK_MAX_IN_FLIGHT": str(in_flight), "WEBHOOK_DEADLINE_MARGIN": "1",
            "POWERTOOLS_LOG_LEVEL": "WARNING", "POWERTOOLS_METRICS_NAMESPACE": "onceonly-bench"}


def _replica(env: dict[str, str], batches: list[dict[str, Any]], barrier: Any, results: Any) -> None:
    """One warm container: load the handler and open its clients, wait for the
    others, then invoke it on each batch in turn, timing each invocation."""
    os.environ.update(env)
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - Powertools' EMF metrics, not wanted here
    from onceonly_app.appdb import clients
    from onceonly_cli.lambda_runtime import LambdaContext, load_handler

    handler = load_handler(REPO_ROOT / "functions" / "webhook_dispatch", "app.handler")
    clients.coordination_store().queue(env["WEBHOOK_QUEUE"]).depth()  # one round trip each, before the barrier
    with clients.db_pool().connection() as conn:
        conn.execute("SELECT 1")
    barrier.wait(RUN_TIMEOUT)
    durations, failures = [], 0
    for event in batches:
        started = time.monotonic()
        response = handler(event, LambdaContext("webhook-dispatch", timeout_seconds=60))
        durations.append(time.monotonic() - started)
        failures += len(response["batchItemFailures"])
    results.put({"durations": durations, "failures": failures})


def _batches(places: Places, receiver: WebhookReceiver, latency: float, count: int) -> list[dict[str, Any]]:
    """``count`` SQS batches, each record a new event for a subscription of its own."""
    template = json.loads((REPO_ROOT / "events" / "webhook_dispatch.json").read_text())["Records"][0]
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
        per_replica = [_batches(places, receiver, latency, batches) for _ in range(replicas)]
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
    deliveries = replicas * batches * BATCH
    lambda_seconds = sum(sum(r["durations"]) for r in reports)
    wall = max(sum(r["durations"]) for r in reports)  # the replicas ran at once
    return {
        "section": "delivery_cost", "latency_ms": round(latency * 1000), "mode": mode, "replicas": replicas,
        "items": deliveries, "lambda_seconds_per_delivery": lambda_seconds / deliveries,
        "per_second": deliveries / lambda_seconds,  # per replica: its deliveries over the time it was invoked
        "total_per_second": deliveries / wall,
        "invocation_ms": 1000 * lambda_seconds / (replicas * batches),
        # Left for the retry function: a first attempt that did not succeed (none expected).
        "not_yet_delivered": deliveries - statuses.get("succeeded", 0),
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


def main(argv: list[str] | None = None) -> None:
    import argparse
    from dataclasses import replace

    from bench.places import scratch_places
    from bench.report import Report
    from bench.sizes import FULL
    from bench.targets import _Judge

    parser = argparse.ArgumentParser(prog="python -m bench.delivery_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs per figure (default 1: a few minutes)")
    sizes = replace(FULL, repeat=parser.parse_args(argv).repeat)
    started = time.monotonic()
    with scratch_places() as places:
        runs = run(places, sizes)
    report = Report({"runs": runs}, sizes, [_Judge(runs, sizes).delivery_cost()])
    print("\n".join([*report.delivery_cost(), *report.targets_table()]))
    print(f"({(time.monotonic() - started) / 60:.1f} min, {sizes.repeat} run(s) per figure, load average "
          f"{os.getloadavg()[0]:.1f} at the end)")


if __name__ == "__main__":
    main()
