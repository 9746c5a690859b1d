"""Worker processes of the recover race (tests/onceonly_app/concurrency/test_webhooks_recover_race.py):
even-numbered workers run the REAL retry handler, invocation after invocation;
odd-numbered ones run `recover` on the subscription, round after round. Each
opens its connections with one round trip before the start line, and writes
every invocation or round (with its start and end time) to its own history."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from onceonly_cli.local.lambda_runtime import LambdaContext, close_function_clients
from tests.support.delivery.webhook_workers import _handler
from tests.support.functions.events import scheduled_event
from tests.support.functions.function_clients import open_function_clients

RECOVER_PAUSE = 0.05  # seconds between two recover rounds of one worker


def recover_race_worker(worker_no: int, barrier: Any, history_path: Path, env: dict[str, str], webhook_id: str,
                        since: float, seconds: float) -> None:
    if worker_no % 2 == 0:
        _retrying(worker_no, barrier, history_path, env, webhook_id, seconds)
    else:
        _recovering(worker_no, barrier, history_path, env, webhook_id, since, seconds)


def _unfinished(conn: Any, webhook_id: str) -> int:
    row = conn.execute("SELECT count(*) FROM webhook_deliveries WHERE webhook_id = %s AND status <> 'succeeded'",
                       (webhook_id,)).fetchone()
    return int(row[0])


def _retrying(worker_no: int, barrier: Any, history_path: Path, env: dict[str, str], webhook_id: str,
              seconds: float) -> None:
    import psycopg

    from tests.support.races.race import BARRIER_TIMEOUT, History

    handler = _handler("webhook_retry", env)
    open_function_clients()
    history = History(history_path)
    with psycopg.connect(env["DATABASE_URL"], autocommit=True) as conn:
        _unfinished(conn, webhook_id)
        barrier.wait(BARRIER_TIMEOUT)
        deadline = time.monotonic() + seconds
        while _unfinished(conn, webhook_id) and time.monotonic() < deadline:
            start = time.time()
            summary = handler(scheduled_event("webhook_retry"),
                              LambdaContext(function_name="webhook-retry", timeout_seconds=30))
            history.write(worker=worker_no, kind="retry", start=start, end=time.time(), **summary)
            if not summary["claimed"]:
                time.sleep(RECOVER_PAUSE)  # nothing due now: as the schedule would, come back later
    history.close()
    close_function_clients()


def _recovering(worker_no: int, barrier: Any, history_path: Path, env: dict[str, str], webhook_id: str,
                since: float, seconds: float) -> None:
    import psycopg

    import onceonly
    from onceonly_app.webhooks import recovery
    from tests.support.races.race import BARRIER_TIMEOUT, PING, History

    store = onceonly.connect(env["ONCEONLY_STORE_URL"])
    store.inspect(PING)
    queue = store.queue(env["WEBHOOK_QUEUE"])
    history = History(history_path)
    with psycopg.connect(env["DATABASE_URL"], autocommit=True) as conn:
        _unfinished(conn, webhook_id)
        barrier.wait(BARRIER_TIMEOUT)
        deadline = time.monotonic() + seconds
        while _unfinished(conn, webhook_id) and time.monotonic() < deadline:
            start = time.time()
            done = recovery.recover(conn, queue, webhook_id, since, actor=f"race-{worker_no}")
            history.write(worker=worker_no, kind="recover", start=start, end=time.time(), requeued=done.count,
                          previous=dict(done.previous))
            time.sleep(RECOVER_PAUSE)
    history.close()
    store.close()
