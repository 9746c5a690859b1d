"""The notifications job against PostgreSQL and moto's SES: sends, retries with
backoff, and ends in a kept `failed` state after bounded failures."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from psycopg_pool import ConnectionPool

import onceonly
from onceonly_app.billing import notifications
from onceonly_app.billing.config import NotificationSettings
from onceonly_app.billing.ses import SesNotifier
from tests.support import jobs_data as data
from tests.support.jobs_helpers import aws_client, sent_emails
from tests.support.jobs_inprocess import run_tick

pytest_plugins = ("tests.support.jobs_fixtures",)


def settings(sender: str, **changes: object) -> NotificationSettings:
    base = {"sender": sender, "claim_ttl": 30.0, "max_attempts": 3, "batch_size": 10,
            "retry_schedule": (60.0, 300.0)}
    return NotificationSettings(**{**base, **changes})  # type: ignore[arg-type]


def test_sends_each_pending_notification_once(pool: ConnectionPool, pg_store: onceonly.Store, jobs_db: str,
                                              moto_endpoint: str, ses_sender: str, unique: str) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        keys = [data.add_notification(conn, tenant) for _ in range(3)]
    ses = SesNotifier(aws_client("ses", moto_endpoint), ses_sender)

    def body(tick: onceonly.Tick) -> notifications.SendResult:
        return notifications.run(pool, tick, ses, settings(ses_sender), tenant=tenant)

    first = run_tick(pg_store, unique, "2026-11-29T10:05:00Z", body)["result"]
    later = run_tick(pg_store, unique, "2026-11-29T10:10:00Z", body)["result"]

    assert (first.sent, later.sent) == (3, 0)
    assert len(sent_emails(f"@{tenant}.test")) == 3
    with data.connect(jobs_db) as conn:
        rows = data.notification_rows(conn, tenant)
        ids = data.rows(conn, "SELECT provider_message_id FROM notifications WHERE tenant_id = %s", tenant)
    assert [r["notification_key"] for r in rows] == sorted(keys)
    assert [(r["status"], r["attempts"], r["sent_rows"]) for r in rows] == [("sent", 1, 1)] * 3
    assert all(i["provider_message_id"] for i in ids)


def test_a_failed_send_is_retried_later_with_backoff(pool: ConnectionPool, pg_store: onceonly.Store,
                                                     jobs_db: str, moto_endpoint: str, unique: str) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        data.add_notification(conn, tenant)
    unverified = SesNotifier(aws_client("ses", moto_endpoint), "nobody@unverified.test")

    result = run_tick(pg_store, unique, "2026-11-29T10:05:00Z", lambda t: notifications.run(
        pool, t, unverified, settings("nobody@unverified.test"), tenant=tenant))["result"]

    assert (result.sent, result.retrying, result.failed) == (0, 1, 0)
    with data.connect(jobs_db) as conn:
        (row,) = data.rows(conn, "SELECT status, attempts, last_error, claimable_at FROM notifications"
                                 " WHERE tenant_id = %s", tenant)
    assert row["status"] == "pending" and row["attempts"] == 1 and "MessageRejected" in row["last_error"]
    wait = (row["claimable_at"] - datetime.now(UTC)).total_seconds()
    assert 40 < wait < 70  # the first retry delay (60 s) with jitter


def test_bounded_failures_end_in_failed_and_the_row_is_kept(pool: ConnectionPool, pg_store: onceonly.Store,
                                                            jobs_db: str, moto_endpoint: str,
                                                            unique: str) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        data.add_notification(conn, tenant)
    unverified = SesNotifier(aws_client("ses", moto_endpoint), "nobody@unverified.test")
    quick = settings("nobody@unverified.test", retry_schedule=(0.05,))  # retries due almost at once

    outcomes = []
    for minute in (5, 10, 15, 20):  # one claim per five-minute tick; the fourth finds nothing left
        time.sleep(0.1)
        result = run_tick(pg_store, unique, f"2026-11-29T10:{minute:02d}:00Z", lambda t: notifications.run(
            pool, t, unverified, quick, tenant=tenant))["result"]
        outcomes.append((result.sent, result.retrying, result.failed))

    assert outcomes == [(0, 1, 0), (0, 1, 0), (0, 0, 1), (0, 0, 0)]
    with data.connect(jobs_db) as conn:
        rows = data.notification_rows(conn, tenant)
    assert [(r["status"], r["attempts"], r["attempt_rows"], r["sent_rows"]) for r in rows] == [("failed", 3, 3, 0)]
    assert sent_emails(f"@{tenant}.test") == []
