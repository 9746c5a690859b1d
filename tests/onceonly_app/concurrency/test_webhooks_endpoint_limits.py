"""Per-endpoint limits across replicas (docs/webhooks.md, "Per-endpoint
limits"): several OS processes run the real retry handler at once against one
subscription capped at MAX_IN_FLIGHT requests; the local receiver records when
each request arrived and was answered. The cap is never exceeded, every
delivery arrives exactly once, and a delivery held back by the cap used no
attempt. Evidence: the receiver's history and the deliveries table."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

import onceonly
from onceonly_app.webhooks import subscriptions
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.endpoint_limits import HELD_BACK_DELAY, semaphore_name
from onceonly_cli.simulate.subscription_checks import max_open
from onceonly_cli.testing.receiver import Behaviour, WebhookReceiver
from tests.support import BACKENDS
from tests.support.delivery.held_deliveries import held_subscription
from tests.support.delivery.webhook_workers import retry_worker
from tests.support.delivery.webhooks import (
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
from tests.support.races.race import run_workers

pytestmark = pytest.mark.concurrency
WORKERS = 4
EVENTS = 16
MAX_IN_FLIGHT = 2
LATENCY = 0.25  # the receiver's answer time: long enough for the workers' requests to overlap


def _tenant(conn: psycopg.Connection[Any]) -> str:
    tenant = new_id("tenant")
    conn.execute("INSERT INTO billing_tenants (tenant_id) VALUES (%s)", (tenant,))
    return tenant


# and on a Redis Cluster: the endpoint's semaphore is one key, on its own hash tag
@pytest.mark.parametrize("store_url", [*BACKENDS, "redis_cluster"], indirect=True)
def test_replicas_never_exceed_the_endpoints_in_flight_cap_and_lose_nothing(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver, tmp_path: Path
) -> None:
    # Two claims per round and per worker: the 4 replicas share the queue (and each still sends two at once).
    env = webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=new_id("webhook-retries"), WEBHOOK_CLAIM_BATCH="2")
    with psycopg.connect(webhook_db, autocommit=True) as conn:
        # Held while disabled, then released all at once: EVENTS deliveries due now for the replicas.
        webhook_id, expected = held_subscription(conn, env, receiver, EVENTS, Behaviour(latency=LATENCY),
                                                 max_in_flight=MAX_IN_FLIGHT)
        assert len(subscriptions.enable(conn, store.queue(env["WEBHOOK_QUEUE"]), webhook_id).released) == EVENTS

    summaries = run_workers(retry_worker, WORKERS, tmp_path / "retry", env, won=lambda s: s["claimed"] > 0)
    with lambda_env(env) as (_, retry):  # the held-back ones come due again shortly
        drive_retries(retry, lambda: len(receiver.successes()) == EVENTS)

    history = receiver.history()
    assert max_open(history) == MAX_IN_FLIGHT  # reached, never exceeded
    assert sum(s["deferred"] for s in summaries) > 0  # the cap held some back: the replicas really contended
    assert receiver.successes() == dict.fromkeys(expected, 1)  # nothing lost
    assert Counter(r.webhook_id for r in history) == dict.fromkeys(expected, 1)  # nothing sent twice
    rows = deliveries(webhook_db, expected)
    # attempts restarted at the release; a held-back turn used none of them
    assert {(r["status"], r["attempts"]) for r in rows.values()} == {("succeeded", 1)}


RATE = 20.0
TAKERS = 4
TRIES = 60


def _rate_taker(worker_no: int, barrier: Any, history_path: Path, db: str, webhook_ids: list[str]) -> None:
    """Take tokens of the buckets of ``webhook_ids``, all in one statement (in
    an order of the worker's own), as fast as possible; record each grant's time."""
    from psycopg_pool import ConnectionPool

    from onceonly_app.webhooks.endpoint_limits import SQL
    from tests.support.races.race import BARRIER_TIMEOUT, History

    history = History(history_path)
    mine = webhook_ids[worker_no % len(webhook_ids):] + webhook_ids[:worker_no % len(webhook_ids)]
    with ConnectionPool(db, min_size=1, max_size=1, open=True) as pool:
        with pool.connection() as conn:
            conn.execute("SELECT 1")  # connected before the barrier
        barrier.wait(BARRIER_TIMEOUT)
        for _ in range(TRIES):
            with pool.connection() as conn:
                taken = {row[0] for row in conn.execute(SQL["take_rate_tokens"],
                                                        {"webhook_ids": mine, "rates": [RATE] * len(mine)})}
            at = time.time()
            for webhook_id in mine:
                history.write(worker=worker_no, webhook_id=webhook_id, at=at, granted=webhook_id in taken)
            time.sleep(0.01)
    history.close()


def test_the_rate_bucket_grants_at_most_a_burst_plus_the_rate_across_processes(
        webhook_db: str, tmp_path: Path) -> None:
    """Two buckets taken from in one statement by every process, in different
    orders: each grants at most its burst plus its rate, and no two takers
    deadlock (a deadlock would fail a worker)."""
    with psycopg.connect(webhook_db, autocommit=True) as conn:
        tenant = _tenant(conn)
        webhook_ids = [subscriptions.add(conn, tenant, "http://127.0.0.1:9/", rate_per_second=RATE,
                                         allow_http_hosts={"127.0.0.1"}).id for _ in range(2)]
    events = run_workers(_rate_taker, TAKERS, tmp_path / "rate", webhook_db, webhook_ids,
                         won=lambda e: e["granted"])
    assert len(events) == TAKERS * TRIES * len(webhook_ids)
    for webhook_id in webhook_ids:
        mine = [e for e in events if e["webhook_id"] == webhook_id]
        grants = sorted(e["at"] for e in mine if e["granted"])
        assert len(grants) < len(mine)  # some were refused: the bucket ran dry
        # Any window of w seconds holds at most the burst (one second's worth) plus w x rate.
        for i, start in enumerate(grants):
            for j in range(i, len(grants)):
                window = grants[j] - start
                assert j - i + 1 <= RATE + RATE * window + 1, (j - i + 1, window)  # +1: clock skew between processes
        assert len(grants) >= RATE  # the burst was granted


def _emitted(output: str) -> Counter[str]:
    """The metrics the handlers published (Powertools' EMF lines on stdout), summed by name."""
    emitted: Counter[str] = Counter()
    for line in output.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            record = json.loads(line)
            for directive in record["_aws"]["CloudWatchMetrics"]:
                for metric in directive["Metrics"]:
                    value = record[metric["Name"]]
                    emitted[metric["Name"]] += int(sum(value) if isinstance(value, list) else value)
    return emitted


def test_a_first_attempt_held_back_by_the_cap_is_delayed_without_using_an_attempt(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver,
    capsys: pytest.CaptureFixture[str]
) -> None:
    env = webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=new_id("webhook-retries"))
    with psycopg.connect(webhook_db, autocommit=True) as conn:
        added = subscriptions.add(conn, _tenant(conn), "http://127.0.0.1:9/", max_in_flight=1,
                                  allow_http_hosts={"127.0.0.1"})
        subscriptions.update(conn, added.id, url=receiver.endpoint(new_id("ep"), added.secret),
                             allow_http_hosts={"127.0.0.1"})
        tenant = str(subscriptions.show(conn, added.id)["tenant_id"])
    busy = store.take_permit(semaphore_name(added.id), 1, ttl=30)  # another replica's request in flight
    assert busy is not None
    event_id = new_id("evt")
    delivery_id = delivery_id_for(added.id, event_id)
    with lambda_env(env) as (dispatch, retry):
        assert dispatch(sqs_event([message(added.id, event_id, tenant_id=tenant)]),
                        context("dispatch")) == {"batchItemFailures": []}
        row = deliveries(webhook_db, [delivery_id])[delivery_id]
        assert (row["status"], row["attempts"]) == ("retrying", 0) and receiver.history() == []
        # Counted as what it was, as the retry worker counts it: deferred, not failed.
        emitted = _emitted(capsys.readouterr().out)
        assert emitted["deliveries_deferred"] == 1 and emitted["deliveries_failed"] == 0, emitted
        time.sleep(HELD_BACK_DELAY[1])  # due again
        assert retry(scheduled_event("webhook_retry"), context("retry", 20))["deferred"] >= 1
        assert receiver.history() == []  # still held back: the cap is full
        assert store.return_permit(busy)
        drive_retries(retry, lambda: receiver.successes()[delivery_id] == 1)
    row = deliveries(webhook_db, [delivery_id])[delivery_id]
    assert (row["status"], row["attempts"]) == ("succeeded", 1)
