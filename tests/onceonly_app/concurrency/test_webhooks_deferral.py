"""Deliveries held back by an endpoint's limits (docs/webhooks.md, "Per-endpoint
limits"), with the real handlers on the coordination store in use and a local
receiver recording when each request arrived:

- the rate is proven end to end: replicas in several OS processes never get
  more requests to the receiver than the rate allows;
- a delivery held back by the rate is due at its turn (the next token time,
  after every delivery already waiting), so a backlog costs about one claim
  per delivery, not a claim every few hundred milliseconds;
- one endpoint's backlog does not hold up another endpoint's due deliveries
  (several OS processes run the retry handler beside both);
- a delivery held back past the retention expires: waiting is bounded."""

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
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.endpoint_limits import DEFER_RETENTION, semaphore_name
from onceonly_cli.testing.receiver import Behaviour, ReceivedRequest, WebhookReceiver
from tests.support.delivery.held_deliveries import held_subscription, new_tenant
from tests.support.delivery.webhooks import (
    UNLIMITED,
    context,
    deliveries,
    drive_retries,
    lambda_env,
    message,
    new_id,
    sqs_event,
    webhook_env,
)
from tests.support.functions.events import scheduled_event
from tests.support.races.race import CTX, run_workers

pytestmark = pytest.mark.concurrency

def _loop_worker(worker_no: int, barrier: Any, history_path: Path, env: dict[str, str], seconds: float,
                 stop: Any = None) -> None:
    """Invoke the real retry handler in a loop for ``seconds`` (or until ``stop``
    is set), as overlapping schedules would."""
    import os

    from onceonly_cli.local.lambda_runtime import LambdaContext, close_function_clients, load_handler
    from tests.support import REPO_ROOT
    from tests.support.functions.function_clients import open_function_clients
    from tests.support.races.race import BARRIER_TIMEOUT, History

    os.environ.update(env)
    handler = load_handler(REPO_ROOT / "functions" / "webhook_retry", "app.handler")
    open_function_clients()
    history = History(history_path)
    barrier.wait(BARRIER_TIMEOUT)
    started = time.monotonic()
    while time.monotonic() - started < seconds and not (stop is not None and stop.is_set()):
        summary = handler(scheduled_event("webhook_retry"),
                          LambdaContext(function_name="webhook-retry", timeout_seconds=30))
        history.write(worker=worker_no, **summary)
        time.sleep(0.05)
    history.close()
    close_function_clients()


def most_in_any_window(times: list[float], window: float) -> int:
    """The largest number of ``times`` inside one window of ``window`` seconds."""
    times = sorted(times)
    most, first = 0, 0
    for last, at in enumerate(times):
        while at - times[first] > window:
            first += 1
        most = max(most, last - first + 1)
    return most


RATE = 4.0
RATE_EVENTS = 24
RATE_WORKERS = 3


def test_replicas_never_send_more_than_the_rate_allows(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver, tmp_path: Path
) -> None:
    env = webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=new_id("webhook-retries"))
    with psycopg.connect(webhook_db, autocommit=True) as conn:
        webhook_id, expected = held_subscription(conn, env, receiver, RATE_EVENTS, Behaviour(),
                                                 max_in_flight=1000, rate_per_second=RATE)
        subscriptions.enable(conn, store.queue(env["WEBHOOK_QUEUE"]), webhook_id)
    history = run_workers(_loop_worker, RATE_WORKERS, tmp_path / "rate", env, RATE_EVENTS / RATE + 2,
                          won=lambda e: e["claimed"] > 0)
    with lambda_env(env) as (_, retry):
        drive_retries(retry, lambda: len(receiver.successes()) == RATE_EVENTS, timeout=60)
    requests = [r for r in receiver.history() if r.webhook_id in expected]
    arrivals = [r.received_at for r in requests]
    # The bucket holds one second's worth: in any window of w seconds at most RATE x (1 + w),
    # plus one for the receiver's and the database's clocks.
    for window in (0.25, 1.0, 2.0):
        assert most_in_any_window(arrivals, window) <= RATE * (1 + window) + 1, window
    assert Counter(r.webhook_id for r in requests) == dict.fromkeys(expected, 1)
    assert sum(e["deferred"] for e in history) > 0  # the rate held some back: the replicas contended


def test_a_delivery_held_back_by_the_rate_is_due_at_its_turn(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver
) -> None:
    rate, events = 2.0, 12
    env = webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=new_id("webhook-retries"), WEBHOOK_CLAIM_BATCH="12")
    with psycopg.connect(webhook_db, autocommit=True) as conn:
        webhook_id, expected = held_subscription(conn, env, receiver, events, max_in_flight=1000,
                                                 rate_per_second=rate)
        subscriptions.enable(conn, store.queue(env["WEBHOOK_QUEUE"]), webhook_id)
    with lambda_env(env) as (_, retry):
        started = time.time()
        first = retry(scheduled_event("webhook_retry"), context("retry", 20))
        waiting = sorted(r["next_attempt_at"].timestamp() for r in deliveries(webhook_db, expected).values()
                         if r["status"] == "retrying")
        # The burst (one second's worth) went out; every other one got its own turn, a token apart
        # (a slow run may have sent a few more at their turns already).
        assert first["deferred"] >= len(waiting) >= events - rate - first["succeeded"] + rate and waiting
        gaps = [b - a for a, b in zip(waiting, waiting[1:], strict=False)]
        assert all(gap >= 1 / rate - 0.02 for gap in gaps), gaps
        assert waiting[-1] - started >= (len(waiting) - 1) / rate
        summaries = drive_retries(retry, lambda: len(receiver.successes()) == events, timeout=30)
    # A held-back delivery comes back when its token is there: held back once (again when a loaded
    # worker claimed two turns late together), not every 0.2-0.6 s until its token comes (the last
    # of this backlog waits about 5 s: a dozen times).
    rows = deliveries(webhook_db, expected)
    deferrals = sorted(r["deferrals"] for r in rows.values())
    assert deferrals[-1] <= 3 and sum(deferrals) <= 1.5 * (events - rate), deferrals
    claims = sum(s["claimed"] for s in [first, *summaries])
    assert claims <= 2 * events, claims
    assert {(r["status"], r["attempts"]) for r in rows.values()} == {("succeeded", 1)}


BACKLOG = 300
SATURATED_RATE = 2.0
STARVE_WORKERS = 2
ANOTHERS = 6
BOUND = 2.0  # seconds: the most another endpoint's due delivery may wait for a claim and its request


def test_a_saturated_endpoint_never_holds_up_another_endpoints_due_deliveries(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver, tmp_path: Path
) -> None:
    env = webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=new_id("webhook-retries"))
    queue = store.queue(env["WEBHOOK_QUEUE"])
    with psycopg.connect(webhook_db, autocommit=True) as conn:
        saturated, backlog = held_subscription(conn, env, receiver, BACKLOG, max_in_flight=1000,
                                               rate_per_second=SATURATED_RATE)
        other, others = held_subscription(conn, env, receiver, ANOTHERS, **UNLIMITED)
        subscriptions.enable(conn, queue, saturated)

    enabled_at: list[float] = []

    def enable_the_other_later() -> None:
        # Once the workers have been through the backlog once (each of its deliveries sent or
        # waiting for its turn), the other endpoint's deliveries come due, all at once.
        with psycopg.connect(webhook_db, autocommit=True) as conn:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and _untouched(conn, saturated):
                time.sleep(0.1)
            enabled_at.append(time.time())
            subscriptions.enable(conn, queue, other)
        receiver.wait_for(lambda reqs: {r.webhook_id for r in reqs} >= set(others), timeout=30)
        stop.set()

    stop = CTX.Event()  # the workers run until the other endpoint's deliveries are in, or a minute
    enabler = threading.Thread(target=enable_the_other_later, daemon=True)
    enabler.start()
    run_workers(_loop_worker, STARVE_WORKERS, tmp_path / "starve", env, 60.0, stop,
                won=lambda e: e["claimed"] > 0)
    enabler.join(10)
    assert enabled_at, "the other endpoint was never enabled"
    got: dict[str, ReceivedRequest] = {r.webhook_id: r for r in receiver.history() if r.webhook_id in others}
    assert set(got) == set(others)
    waits = sorted(r.received_at - enabled_at[0] for r in got.values())
    assert waits[-1] <= BOUND, (store_url.split(":")[0], waits)
    # The backlog was really there, waiting for its turns, while the other endpoint went out.
    sent = sum(r.webhook_id in backlog for r in receiver.history())
    assert 0 < sent < BACKLOG


def _untouched(conn: psycopg.Connection[Any], webhook_id: str) -> int:
    """Deliveries of ``webhook_id`` neither sent nor held back yet."""
    row = conn.execute("SELECT count(*) FROM webhook_deliveries WHERE webhook_id = %s AND deferrals = 0 "
                       "AND status <> 'succeeded'", (webhook_id,)).fetchone()
    assert row is not None
    return int(row[0])


def test_a_delivery_held_back_past_the_retention_expires(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver
) -> None:
    env = webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=new_id("webhook-retries"))
    with psycopg.connect(webhook_db, autocommit=True) as conn:
        added = subscriptions.add(conn, new_tenant(conn), "http://127.0.0.1:9/", max_in_flight=1,
                                  allow_http_hosts={"127.0.0.1"})
        subscriptions.update(conn, added.id, url=receiver.endpoint(new_id("ep"), added.secret),
                             allow_http_hosts={"127.0.0.1"})
        tenant = str(subscriptions.show(conn, added.id)["tenant_id"])
    busy = store.take_permit(semaphore_name(added.id), 1, ttl=60)  # the cap stays full
    assert busy is not None
    event_id = new_id("evt")
    delivery_id = delivery_id_for(added.id, event_id)
    delays = []
    with lambda_env(env) as (dispatch, retry):
        dispatch(sqs_event([message(added.id, event_id, tenant_id=tenant)]), context("dispatch"))
        for _ in range(3):  # held back again and again: each wait longer than the one before
            row = deliveries(webhook_db, [delivery_id])[delivery_id]
            assert row["status"] == "retrying"
            delays.append(row["next_attempt_at"].timestamp() - row["updated_at"].timestamp())
            time.sleep(max(0.0, row["next_attempt_at"].timestamp() - time.time()) + 0.05)
            assert retry(scheduled_event("webhook_retry"), context("retry", 20))["deferred"] == 1
        assert delays == sorted(delays) and delays[-1] > delays[0] * 2, delays
        with psycopg.connect(webhook_db, autocommit=True) as conn:  # its event is now older than the retention
            conn.execute("UPDATE webhook_deliveries SET occurred_at = now() - make_interval(secs => %s) "
                         "WHERE id = %s", (DEFER_RETENTION + 60, delivery_id))
        row = deliveries(webhook_db, [delivery_id])[delivery_id]
        time.sleep(max(0.0, row["next_attempt_at"].timestamp() - time.time()) + 0.05)
        assert retry(scheduled_event("webhook_retry"), context("retry", 20))["deferred"] == 1
    row = deliveries(webhook_db, [delivery_id])[delivery_id]
    assert (row["status"], row["attempts"], row["next_attempt_at"]) == ("expired", 0, None)
    assert "longer than the retention" in row["last_error"]
    assert store.queue(env["WEBHOOK_QUEUE"]).depth().total == 0  # nothing left to claim
    assert receiver.history() == []
    assert store.return_permit(busy)

