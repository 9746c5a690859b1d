"""`enable` run again, and concurrently, while live retry workers deliver what
the first one released (docs/webhooks.md, "Disabling and enabling"). A worker
claims a batch of WEBHOOK_CLAIM_BATCH (8) and sends WEBHOOK_MAX_IN_FLIGHT (2)
at a time, so most of its claims wait, claimed but not yet stamped. An enable
that re-put them would take them from that worker and hand them to another
one, and both would POST. Several OS processes: two retry workers invoking the
real handler in a loop, and two enablers running enable twice each meanwhile.
Evidence: the receiver's history (each webhook-id POSTed once) and the
enablers' own histories (they ran while requests were in flight)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

import onceonly
from onceonly_app.webhooks import subscriptions
from onceonly_cli.testing.receiver import Behaviour, WebhookReceiver
from tests.support.delivery.held_deliveries import held_subscription
from tests.support.delivery.webhooks import UNLIMITED, deliveries, drive_retries, lambda_env, new_id, webhook_env
from tests.support.functions.events import scheduled_event
from tests.support.races.race import CTX, run_workers

pytestmark = pytest.mark.concurrency
EVENTS = 8
LATENCY = 0.4  # the receiver's answer time: a batch of 8, two at a time, takes about 1.6 s
RETRY_WORKERS = 2
ENABLERS = 2
ENABLE_AT = (0.1, 0.4)  # seconds after the first request arrived: while the rest of the batch waits
LOOP_FOR = 3.0  # seconds each retry worker keeps invoking the handler


def _live_worker(worker_no: int, barrier: Any, history_path: Path, env: dict[str, str], webhook_id: str,
                 sending: Any) -> None:
    """Workers 0..RETRY_WORKERS-1 invoke the real retry handler in a loop, as
    overlapping schedules would; the others run enable at ENABLE_AT after the
    receiver got its first request (``sending`` is set)."""
    import os

    from onceonly_cli.local.lambda_runtime import LambdaContext, close_function_clients, load_handler
    from tests.support import REPO_ROOT
    from tests.support.functions.function_clients import open_function_clients
    from tests.support.races.race import BARRIER_TIMEOUT, History

    history = History(history_path)
    os.environ.update(env)
    if worker_no < RETRY_WORKERS:
        handler = load_handler(REPO_ROOT / "functions" / "webhook_retry", "app.handler")
        open_function_clients()
        barrier.wait(BARRIER_TIMEOUT)
        started = time.monotonic()
        while time.monotonic() - started < LOOP_FOR:
            summary = handler(scheduled_event("webhook_retry"),
                              LambdaContext(function_name="webhook-retry", timeout_seconds=30))
            history.write(worker=worker_no, kind="retry", **summary)
            time.sleep(0.05)
        close_function_clients()
    else:
        store = onceonly.connect(env["ONCEONLY_STORE_URL"])
        queue = store.queue(env["WEBHOOK_QUEUE"])
        with psycopg.connect(env["DATABASE_URL"], autocommit=True) as conn:
            queue.depth()  # connected before the start line
            conn.execute("SELECT 1")
            barrier.wait(BARRIER_TIMEOUT)
            assert sending.wait(BARRIER_TIMEOUT), "no request arrived"
            started = time.monotonic()
            for at in ENABLE_AT:
                time.sleep(max(0.0, at - (time.monotonic() - started)))
                done = subscriptions.enable(conn, queue, webhook_id, actor=f"enabler-{worker_no}")
                history.write(worker=worker_no, kind="enable", at=time.time(), released=done.released)
        store.close()
    history.close()


def test_enable_twice_and_concurrently_beside_live_workers_never_posts_twice(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver, tmp_path: Path
) -> None:
    env = webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=new_id("webhook-retries"), WEBHOOK_CLAIM_BATCH="8",
                      WEBHOOK_MAX_IN_FLIGHT="2")
    with psycopg.connect(webhook_db, autocommit=True) as conn:
        webhook_id, expected = held_subscription(conn, env, receiver, EVENTS, Behaviour(latency=LATENCY),
                                                 **UNLIMITED)
        first = subscriptions.enable(conn, store.queue(env["WEBHOOK_QUEUE"]), webhook_id)
        assert sorted(first.released) == sorted(expected)

    sending = CTX.Event()  # the receiver's first request: the enablers start their clocks
    watcher = threading.Thread(target=lambda: receiver.wait_for(bool, timeout=120) and sending.set(), daemon=True)
    watcher.start()

    history = run_workers(_live_worker, RETRY_WORKERS + ENABLERS, tmp_path / "live", env, webhook_id, sending,
                          won=lambda e: e["kind"] == "enable" or e.get("claimed", 0) > 0)
    with lambda_env(env) as (_, retry):  # anything the workers' time ran out on
        drive_retries(retry, lambda: len(receiver.successes()) == EVENTS)

    requests = receiver.history()
    assert Counter(r.webhook_id for r in requests) == dict.fromkeys(expected, 1)  # none POSTed twice
    enables = [e for e in history if e["kind"] == "enable"]
    assert len(enables) == ENABLERS * len(ENABLE_AT)
    assert all(e["released"] == [] for e in enables)  # everything had its queue item already
    # The enables really ran while the workers were sending: a request arrived before
    # the first of them and another was answered after it.
    first_enable = min(e["at"] for e in enables)
    assert min(r.received_at for r in requests) < first_enable < max(r.answered_at or 0 for r in requests)
    assert sum(e.get("claimed", 0) for e in history) >= EVENTS
    rows = deliveries(webhook_db, expected)
    assert {(r["status"], r["attempts"]) for r in rows.values()} == {("succeeded", 1)}
