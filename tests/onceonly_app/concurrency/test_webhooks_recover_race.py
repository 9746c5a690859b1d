"""Recover racing live retry workers: OS processes run the real retry handler
and `recover` on one subscription at once, again and again, while its
deliveries fail and are retried. Recover re-queues a delivery waiting for its
retry under a new generation, so a claim taken before is fenced off and never
POSTs; one being attempted is left to its holder; one that succeeded is never
sent again. The evidence is the receiver's own history of every request."""

from __future__ import annotations

import time
from itertools import pairwise
from pathlib import Path

import psycopg
import pytest

import onceonly
from onceonly_cli.testing.receiver import Behaviour, WebhookReceiver
from tests.support.delivery.recovery_workers import recover_race_worker
from tests.support.delivery.subscription_fixtures import add_subscription
from tests.support.delivery.webhooks import (
    context,
    deliveries_for,
    drive_retries,
    lambda_env,
    message,
    new_id,
    sqs_event,
)
from tests.support.races.race import run_workers

pytestmark = pytest.mark.concurrency
DELIVERIES = 20
WORKERS = 4  # two retry workers, two recovering
REQUESTS_EACH = 4  # two failures before the recover (then dead), one failure and one success after


def test_recover_racing_live_retry_workers_never_posts_a_delivery_twice(
        pg_env: dict[str, str], webhook_db: str, conn: psycopg.Connection, tenant: str, pg_store: onceonly.Store,
        tmp_path: Path) -> None:
    env = {**pg_env, "WEBHOOK_RETRY_SCHEDULE_SECONDS": "0.05"}  # two attempts per generation, then dead
    with WebhookReceiver(quiet=True) as receiver:
        # Every delivery's first three requests fail: two make it dead before the race, the third makes it a
        # live retry during the race (recover makes it due again, a retry worker attempts it), the fourth succeeds.
        webhook_id, _ = add_subscription(conn, tenant, receiver, Behaviour(fail_first=REQUESTS_EACH - 1))
        since = time.time() - 1
        events = [new_id("evt") for _ in range(DELIVERIES)]
        with lambda_env(env) as (dispatch, retry):
            dispatch(sqs_event([message(webhook_id, e, tenant_id=tenant) for e in events[:10]]), context("dispatch"))
            dispatch(sqs_event([message(webhook_id, e, tenant_id=tenant) for e in events[10:]]), context("dispatch"))
            drive_retries(retry, lambda: {r["status"] for r in deliveries_for(webhook_db, [webhook_id])} == {"dead"})
        history = run_workers(recover_race_worker, WORKERS, tmp_path / "race", env, webhook_id, since, 60.0,
                              won=_won, timeout=120)
        requests = receiver.history()

    rows = deliveries_for(webhook_db, [webhook_id])
    assert len(rows) == DELIVERIES and {r["status"] for r in rows} == {"succeeded"}
    by_id: dict[str, list] = {}
    for request in requests:
        by_id.setdefault(request.webhook_id or "", []).append(request)
    assert set(by_id) == {r["id"] for r in rows}
    for delivery_id, posts in by_id.items():
        posts.sort(key=lambda r: r.received_at)
        assert all(p.verified for p in posts)
        # Exactly the requests the script needs: none twice, the success last, and never two at once.
        assert [p.status for p in posts] == [500] * (REQUESTS_EACH - 1) + [200], (delivery_id, posts)
        assert all(later.received_at >= earlier.answered_at for earlier, later in pairwise(posts))

    # The race really happened: recover rounds re-queued deliveries waiting for a live retry while the
    # retry workers were delivering them.
    retries = [e for e in history if e["kind"] == "retry" and e["succeeded"]]
    live = [e for e in history if e["kind"] == "recover" and e["previous"].get("retrying")]
    assert retries and live, history
    first_success, last_success = min(e["start"] for e in retries), max(e["end"] for e in retries)
    assert any(first_success <= e["start"] <= last_success for e in live), "no recover ran among the retries"
    assert sum(e["fenced_writes_refused"] + e["finished_elsewhere"] + e["claims_contended"]
               for e in history if e["kind"] == "retry") > 0  # some claim met a recover's newer generation


def _won(event: dict) -> bool:
    if event["kind"] == "retry":
        return bool(event["succeeded"])
    return bool(event["previous"].get("retrying"))
