"""procrastinate (PostgreSQL jobs with SKIP LOCKED) on the same server, for
jobs/s beside onceonly's claims: the parent defers N no-op jobs in one batch,
P worker processes run them until none is left (``wait=False``), and the
jobs' final statuses are checked."""

from __future__ import annotations

import asyncio
import secrets
import sys
from typing import Any

import psycopg

from bench.places import Places
from bench.pool import Job, Workers
from bench.sizes import Sizes

TASK = "bench.noop"
STATUS_COUNTS = "SELECT status::text, count(*) FROM procrastinate_jobs WHERE queue_name = %s GROUP BY 1"


def _noop(i: int) -> None:
    """The job: nothing, so the figure is procrastinate's own cost."""


def _app(url: str, queue: str) -> Any:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))
    app.task(name=TASK, queue=queue)(_noop)
    return app


def worker(url: str, queue: str) -> Job:
    app = _app(url, queue)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(app.open_async())
    loop.run_until_complete(app.job_manager.list_jobs_async(queue=queue, status="doing"))  # one round trip
    yield
    try:
        loop.run_until_complete(app.run_worker_async(
            queues=[queue], wait=False, concurrency=1, listen_notify=False, install_signal_handlers=False,
            fetch_job_polling_interval=0.01, delete_jobs="never"))
    finally:
        loop.run_until_complete(app.close_async())
        loop.close()
    return {"ids": []}


def run(workers: Workers, places: Places, sizes: Sizes) -> list[dict[str, Any]]:
    url = places.postgres_url
    setup = _app(url, "setup")
    with setup.open():
        setup.schema_manager.apply_schema()
    runs = []
    processes = sizes.headline_processes
    for rep in range(sizes.repeat):
        queue = f"bench-{secrets.token_hex(4)}"
        app = _app(url, queue)
        with app.open():
            app.tasks[TASK].batch_defer(*({"i": i} for i in range(sizes.procrastinate_jobs)))
        race = workers.race("bench.procrastinate_jobs:worker", [{"url": url, "queue": queue}] * processes)
        with psycopg.connect(url, autocommit=True) as conn:
            statuses: dict[str, int] = dict(conn.execute(STATUS_COUNTS, (queue,)).fetchall())
        runs.append({"section": "procrastinate", "processes": processes, "rep": rep,
                     "items": sizes.procrastinate_jobs, "elapsed": race.elapsed,
                     "per_second": statuses.get("succeeded", 0) / race.elapsed, "statuses": statuses,
                     "overlapped": processes == 1 or race.overlapped})
    print("procrastinate done", file=sys.stderr, flush=True)
    return runs
