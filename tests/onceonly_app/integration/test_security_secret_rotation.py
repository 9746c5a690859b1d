"""Signing-secret rotation with overlapping validity (docs/security.md): after
a rotation every attempt carries one signature per live secret in its
``webhook-signature`` header, and the ``standardwebhooks`` package verifies the
same request with the old secret and with the new one; once the overlap ends,
only the new secret verifies."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

import onceonly
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.signing import new_secret
from onceonly_app.webhooks.subscriptions import (
    MAX_PREVIOUS,
    SubscriptionDeletedError,
    UnknownSubscriptionError,
    rotate_secret,
)
from onceonly_cli.testing.receiver import ReceivedRequest, WebhookReceiver
from tests.support.cli.cli_support import one_line_error, run_cli
from tests.support.delivery.webhooks import (
    context,
    create_subscription,
    lambda_env,
    message,
    new_id,
    sqs_event,
    webhook_env,
)
from tests.support.races.race import BARRIER_TIMEOUT, History, run_workers


@pytest.fixture
def db(webhook_db: str) -> Any:
    with psycopg.connect(webhook_db) as connection:
        yield connection


def deliver_one(webhook_db: str, postgres_url: str, receiver: WebhookReceiver, webhook_id: str) -> ReceivedRequest:
    event_id = new_id("evt")
    with lambda_env(webhook_env(webhook_db, postgres_url)) as (dispatch, _):
        assert dispatch(sqs_event([message(webhook_id, event_id)]), context("dispatch")) == {"batchItemFailures": []}
    (request,) = receiver.history(delivery_id_for(webhook_id, event_id))
    return request


def verifies(secret: str, request: ReceivedRequest) -> bool:
    try:
        Webhook(secret).verify(request.body, request.headers)
    except WebhookVerificationError:
        return False
    return True


def test_during_the_overlap_old_and_new_secret_both_verify_the_same_request(
        webhook_db: str, postgres_url: str, pg_store: onceonly.Store, receiver: WebhookReceiver, db: Any) -> None:
    old = new_secret()
    endpoint = receiver.endpoint(new_id("ep"), old)  # the receiver still verifies with the old secret
    webhook_id = create_subscription(webhook_db, endpoint, old)
    new = rotate_secret(db, webhook_id, overlap=3600)
    request = deliver_one(webhook_db, postgres_url, receiver, webhook_id)
    assert request.verified and request.status == 200
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    assert verifies(old, request) and verifies(new, request)
    assert not verifies(new_secret(), request)


def test_after_the_overlap_only_the_new_secret_verifies(
        webhook_db: str, postgres_url: str, pg_store: onceonly.Store, receiver: WebhookReceiver, db: Any) -> None:
    old = new_secret()
    webhook_id = create_subscription(webhook_db, receiver.endpoint(new_id("ep"), old), old)
    new = rotate_secret(db, webhook_id, overlap=1)
    time.sleep(1.5)  # the overlap ends (on the database's clock, which decides it both times)
    request = deliver_one(webhook_db, postgres_url, receiver, webhook_id)
    assert request.status == 401 and not request.verified  # the receiver never switched to the new secret
    assert request.headers["webhook-signature"].count("v1,") == 1
    assert verifies(new, request) and not verifies(old, request)


def test_rotations_keep_each_replaced_secret_for_its_own_overlap_and_at_most_a_few(
        webhook_db: str, db: Any) -> None:
    first = new_secret()
    webhook_id = create_subscription(webhook_db, "https://hooks.example.com/r", first)
    second = rotate_secret(db, webhook_id, overlap=3600)
    third = rotate_secret(db, webhook_id, overlap=0)  # `second` is retired at once; `first` keeps its hour
    with psycopg.connect(webhook_db) as conn:
        secret, previous = conn.execute(
            "SELECT secret, previous_secrets FROM webhook_subscriptions WHERE id = %s", (webhook_id,)).fetchone()
    assert secret == third
    assert [p["secret"] for p in previous] == [first]  # `second`'s overlap (0 s) ended: dropped
    for _ in range(MAX_PREVIOUS + 3):
        rotate_secret(db, webhook_id, overlap=3600)
    with psycopg.connect(webhook_db) as conn:
        (count,) = conn.execute("SELECT jsonb_array_length(previous_secrets) FROM webhook_subscriptions"
                                " WHERE id = %s", (webhook_id,)).fetchone()
    assert count == MAX_PREVIOUS
    assert second not in {p["secret"] for p in previous}


def test_rotating_an_unknown_subscription_is_an_error(db: Any) -> None:
    with pytest.raises(UnknownSubscriptionError):
        rotate_secret(db, new_id("no-such-webhook"))


def test_rotating_a_deleted_subscription_or_with_a_negative_overlap_is_an_error_and_changes_nothing(
        webhook_db: str, db: Any) -> None:
    old = new_secret()
    webhook_id = create_subscription(webhook_db, "https://hooks.example.com/neg", old)
    with pytest.raises(ValueError, match="overlap"):
        rotate_secret(db, webhook_id, overlap=-1)
    db.execute("UPDATE webhook_subscriptions SET enabled = false, deleted_at = now() WHERE id = %s", (webhook_id,))
    db.commit()
    with pytest.raises(SubscriptionDeletedError):
        rotate_secret(db, webhook_id)
    (secret,) = db.execute("SELECT secret FROM webhook_subscriptions WHERE id = %s", (webhook_id,)).fetchone()
    assert secret == old


def test_the_rotate_secret_command_prints_the_new_secret_and_keeps_the_old_one(webhook_db: str) -> None:
    old = new_secret()
    webhook_id = create_subscription(webhook_db, "https://hooks.example.com/cli", old)
    result = run_cli("subscriptions", "rotate-secret", webhook_id, "--database", webhook_db, "--overlap", "600",
                     "--json")
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)
    new = printed["secret"]
    assert new.startswith("whsec_") and new != old and new not in result.stderr
    assert printed["overlap"] == 600
    with psycopg.connect(webhook_db) as conn:
        secret, previous = conn.execute(
            "SELECT secret, previous_secrets FROM webhook_subscriptions WHERE id = %s", (webhook_id,)).fetchone()
    assert (secret, [p["secret"] for p in previous]) == (new, [old])
    unknown = run_cli("subscriptions", "rotate-secret", new_id("no-such-webhook"), "--database", webhook_db)
    assert unknown.returncode == 1 and "unknown subscription" in one_line_error(unknown)


# -- two rotations at once --------------------------------------------------------------------------------

RACE_APP = "onceonly-rotate-race"


def rotating_worker(n: int, barrier: Any, history_path: Path, db_url: str, webhook_id: str,
                    secrets: list[str]) -> None:
    """One operator's rotation to ``secrets[n]``, in its own process and
    connection (opened before the barrier)."""
    history, secret = History(history_path), secrets[n]
    with ConnectionPool(db_url, min_size=1, max_size=1, open=True,
                        kwargs={"application_name": RACE_APP}) as pool:
        with pool.connection() as conn:
            conn.execute("SELECT 1")
        barrier.wait(timeout=BARRIER_TIMEOUT)
        with pool.connection() as conn:
            rotated = rotate_secret(conn, webhook_id, overlap=3600, secret=secret, actor=f"operator-{n}") == secret
    history.write(worker=n, rotated=rotated, secret=secret)
    history.close()


def hold_row_until_waited_on(db_url: str, webhook_id: str, waiters: int, seen: dict[str, int]) -> None:
    """Lock the subscription's row until ``waiters`` rotations are blocked on it
    at the same moment: then they surely overlap, whatever the scheduler does."""
    with psycopg.connect(db_url) as conn, psycopg.connect(db_url, autocommit=True) as watch:
        conn.execute("SELECT 1 FROM webhook_subscriptions WHERE id = %s FOR UPDATE", (webhook_id,))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            (blocked,) = watch.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                                       " AND wait_event_type = 'Lock'", (RACE_APP,)).fetchone()
            seen["most_blocked"] = max(seen.get("most_blocked", 0), blocked)
            if blocked >= waiters:
                break
            time.sleep(0.05)
    # leaving the block commits: the waiting rotations go on, one after the other


@pytest.mark.concurrency
def test_two_rotations_at_once_lose_no_secret(webhook_db: str, tmp_path: Path) -> None:
    original = new_secret()
    webhook_id = create_subscription(webhook_db, "https://hooks.example.com/race", original)
    mine = [new_secret(), new_secret()]
    seen: dict[str, int] = {}
    holder = threading.Thread(target=hold_row_until_waited_on, args=(webhook_db, webhook_id, 2, seen))
    holder.start()
    events = run_workers(rotating_worker, 2, tmp_path / "history", webhook_db, webhook_id, mine,
                         won=lambda e: e["rotated"])
    holder.join(130)
    assert seen.get("most_blocked") == 2, seen  # both rotations waited on the row at the same moment
    assert sorted(e["secret"] for e in events if e["rotated"]) == sorted(mine)
    with psycopg.connect(webhook_db) as conn:
        secret, previous = conn.execute(
            "SELECT secret, previous_secrets FROM webhook_subscriptions WHERE id = %s", (webhook_id,)).fetchone()
    assert secret in mine
    assert {p["secret"] for p in previous} == {original, *mine} - {secret}
