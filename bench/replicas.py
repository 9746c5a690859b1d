"""Scaling with replicas: ``onceonly simulate`` (the real handlers as replica
processes, SQS duplicates, the cron jobs) with a receiver that answers in
50 ms, no injected failures or crashes, at 1, 2, 4 and 8 replicas. Delivery
throughput and latency come from its JSON report, and so does its verdict:
exactly-once is checked in every run.

The throughput compared is the --events deliveries' own (first fed to last
delivered): the whole run also holds fixed waits (a 3 s clamped Retry-After,
the cron jobs one after another) that no replica count shortens; its rate is
kept beside it. So is the CPU each run spent: simulate and its replicas
(reaped children, so their rusage counts) per delivery, and how busy the
machine's cores were meanwhile (every process on it, the servers included)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from typing import Any

import psutil

from bench.places import Places
from bench.sizes import Sizes

RUN_TIMEOUT = 300  # seconds for one simulate run


def simulate(places: Places, sizes: Sizes, replicas: int, seed: int) -> dict[str, Any]:
    command = [sys.executable, "-m", "onceonly_cli.main", "simulate", "--database", places.postgres_server_url,
               "--events", str(sizes.replica_events), "--replicas", str(replicas),
               "--receiver-latency", str(sizes.receiver_latency), "--failure-rate", "0", "--crash-rate", "0",
               "--seed", str(seed), "--json"]
    before, machine_before = resource.getrusage(resource.RUSAGE_CHILDREN), psutil.cpu_times()
    done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    after, machine_after = resource.getrusage(resource.RUSAGE_CHILDREN), psutil.cpu_times()
    try:
        report = dict(json.loads(done.stdout))
    except json.JSONDecodeError as exc:
        raise RuntimeError(f"onceonly simulate failed (exit {done.returncode}): {done.stderr[-2000:]}") from exc
    idle = (machine_after.idle + machine_after.iowait) - (machine_before.idle + machine_before.iowait)
    total = sum(machine_after) - sum(machine_before)
    report["cpu"] = {"seconds": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
                     "machine_busy": 1.0 - idle / total if total > 0 else 0.0}
    return report


def run(places: Places, sizes: Sizes) -> list[dict[str, Any]]:
    runs = []
    for rep in range(sizes.repeat):
        for replicas in sizes.replicas:  # interleaved, so a noisy minute hits every count alike
            report = simulate(places, sizes, replicas, seed=1000 * rep + replicas)
            runs.append({
                "section": "replicas", "replicas": replicas, "rep": rep, "items": report["webhooks"]["deliveries"],
                "per_second": report["ordinary_deliveries"]["per_second"],
                "run_per_second": report["throughput_per_second"], "p50_ms": report["latency_ms"]["p50"],
                "p99_ms": report["latency_ms"]["p99"], "exactly_once": bool(report["ok"]),
                "duplicate_posts": report["webhooks"]["duplicate_posts"],
                "lost": report["webhooks"]["lost_deliveries"], "elapsed": report["duration_seconds"],
                "cpu_ms_per_delivery": 1000 * report["cpu"]["seconds"] / max(1, report["webhooks"]["deliveries"]),
                "machine_cpu_percent": 100 * report["cpu"]["machine_busy"],
            })
            print(f"replicas: {replicas} (run {rep + 1}) done", file=sys.stderr, flush=True)
    return runs
