"""The notifications job against PostgreSQL and moto's SES: sends, retries with
backoff, ends in a kept `failed` state after bounded failures, re-checks an
overdue e-mail at send time, and keeps within the invocation's time."""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime

import pytest
from psycopg_pool import ConnectionPool

import onceonly
from onceonly_app.billing import notifications, overdue
from onceonly_app.billing.config import NotificationSettings
from onceonly_app.billing.ses import SendError, SesNotifier
from onceonly_app.runtime.aws import bounded_client, call_seconds
from onceonly_app.runtime.budget import Budget
from tests.support.jobs import jobs_data as data
from tests.support.jobs.jobs_helpers import aws_client, sent_emails
from tests.support.jobs.jobs_inprocess import run_tick


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


def test_an_overdue_email_is_not_sent_once_its_invoice_was_paid(
        pool: ConnectionPool, pg_store: onceonly.Store, jobs_db: str, moto_endpoint: str, ses_sender: str,
        unique: str) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        paid, unpaid = (data.add_invoice(conn, tenant, due_at="2026-11-01T00:00:00Z") for _ in range(2))
        data.ledger_read(conn, unique, tenant=tenant)
    run_tick(pg_store, f"{unique}-overdue", "2026-11-29T02:00:00Z", lambda t: overdue.run(
        pool, t, watcher=unique, tenant=tenant))
    with data.connect(jobs_db) as conn:  # paid after the e-mail was queued, before it was sent
        conn.execute("UPDATE invoices SET status = 'paid' WHERE id = %s", (paid,))
    ses = SesNotifier(aws_client("ses", moto_endpoint), ses_sender)

    result = run_tick(pg_store, unique, "2026-11-29T02:05:00Z", lambda t: notifications.run(
        pool, t, ses, settings(ses_sender), tenant=tenant))["result"]

    assert (result.sent, result.cancelled) == (1, 1)
    assert [m.destinations["ToAddresses"] for m in sent_emails(f"@{tenant}.test")] == [[f"{unpaid}@{tenant}.test"]]
    with data.connect(jobs_db) as conn:
        rows = data.rows(conn, "SELECT invoice_id, status FROM notifications WHERE tenant_id = %s ORDER BY status",
                         tenant)
    assert rows == [{"invoice_id": paid, "status": "cancelled"}, {"invoice_id": unpaid, "status": "sent"}]


class SendsTake20Seconds:
    """SES through moto, on a simulated clock: each send uses 20 s of the invocation."""

    def __init__(self, ses: SesNotifier, seconds_left: float) -> None:
        self.ses, self.left = ses, seconds_left

    def send(self, recipient: str, subject: str, body_text: str) -> str:
        self.left -= 20.0
        return self.ses.send(recipient, subject, body_text)


def test_a_run_near_its_deadline_stops_sending_and_gives_back_its_claims(
        pool: ConnectionPool, pg_store: onceonly.Store, jobs_db: str, moto_endpoint: str, ses_sender: str,
        unique: str) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        for _ in range(4):
            data.add_notification(conn, tenant)
    sender = SendsTake20Seconds(SesNotifier(aws_client("ses", moto_endpoint), ses_sender), seconds_left=45.0)

    result = run_tick(pg_store, unique, "2026-11-29T10:05:00Z", lambda t: notifications.run(
        pool, t, sender, settings(ses_sender), tenant=tenant, budget=Budget(lambda: sender.left)))["result"]

    # 45 s: a send needs a whole SES call's bound (17 s) beyond the reserve (5 s): two fit, then 5 s are left
    assert (result.sent, result.released) == (2, 2)
    assert len(sent_emails(f"@{tenant}.test")) == 2
    with data.connect(jobs_db) as conn:
        rows = data.notification_rows(conn, tenant)
        due_now = data.rows(conn, "SELECT count(*) AS n FROM notifications WHERE tenant_id = %s"
                                  " AND status = 'pending' AND claimable_at <= now()", tenant)
    assert sorted((r["status"], r["attempts"]) for r in rows) == [("pending", 0)] * 2 + [("sent", 1)] * 2
    assert due_now == [{"n": 2}]  # given back at once, not after the claim's lease


def test_an_ses_call_that_gets_no_answer_ends_within_its_bound(ses_sender: str) -> None:
    """boto3's defaults wait 60 s per read and retry; the jobs' clients are
    bounded (aws.bounded_client). Against a server that accepts and never
    answers, one send ends within the bound the budget counts on."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # connections complete in the kernel; nothing ever answers
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        client = bounded_client("ses", connect=0.5, read=0.5, attempts=2, endpoint_url=endpoint,
                                region_name="us-east-1")
        started = time.monotonic()
        with pytest.raises(SendError, match="ReadTimeout"):
            SesNotifier(client, ses_sender).send("someone@example.test", "Hi", "Hello")
    assert time.monotonic() - started < 2 * call_seconds(0.5, 0.5, 2)
