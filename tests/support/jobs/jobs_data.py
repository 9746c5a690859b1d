"""Seed one test's rows (under its own tenant) and count what the jobs
recorded for that tenant afterwards: the recorded history is the evidence."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tests.support.jobs.jobs_helpers import new_id


def connect(db_url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(db_url, autocommit=True, row_factory=dict_row)  # type: ignore[arg-type]


def add_invoice(conn: psycopg.Connection[Any], tenant: str, *, due_at: datetime | str, status: str = "open",
                amount_cents: int = 12_50, invoice_id: str | None = None, currency: str = "USD") -> str:
    invoice_id = invoice_id or new_id("inv")
    conn.execute(
        "INSERT INTO invoices (id, tenant_id, customer_email, amount_cents, currency, status, due_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (invoice_id, tenant, f"{invoice_id}@{tenant}.test", amount_cents, currency, status, due_at),
    )
    return invoice_id


def add_receiving_account(conn: psycopg.Connection[Any], tenant: str, account: str) -> None:
    """``account`` receives ``tenant``'s payments (table of 0003_billing_correctness.sql)."""
    conn.execute("INSERT INTO payment_accounts (account_id, tenant_id) VALUES (%s, %s)", (account, tenant))


def set_time_zone(conn: psycopg.Connection[Any], tenant: str, time_zone: str) -> None:
    conn.execute("INSERT INTO billing_tenants (tenant_id, time_zone) VALUES (%s, %s)", (tenant, time_zone))


def add_schedule(conn: psycopg.Connection[Any], tenant: str, *, cadence: str, anchor: date,
                 amount_cents: int = 10_00) -> str:
    schedule_id = new_id("sch")
    conn.execute(
        "INSERT INTO billing_schedules (id, tenant_id, customer_email, amount_cents, cadence, anchor)"
        " VALUES (%s, %s, %s, %s, %s, %s)",
        (schedule_id, tenant, f"{schedule_id}@{tenant}.test", amount_cents, cadence, anchor),
    )
    return schedule_id


def add_notification(conn: psycopg.Connection[Any], tenant: str) -> str:
    key = new_id("note")
    conn.execute(
        "INSERT INTO notifications (notification_key, tenant_id, kind, recipient, subject, body_text)"
        " VALUES (%s, %s, 'test', %s, 'Hello', 'A test notification.')",
        (key, tenant, f"{key}@{tenant}.test"),
    )
    return key


def add_subscription(conn: psycopg.Connection[Any], tenant: str) -> str:
    """An enabled webhook subscription of ``tenant`` (0001_webhooks.sql, 0004_webhook_tenants.sql)."""
    webhook_id = new_id("wh")
    conn.execute("INSERT INTO webhook_subscriptions (id, tenant_id, url, secret, enabled)"
                 " VALUES (%s, %s, %s, %s, true)",
                 (webhook_id, tenant, "https://receiver.invalid/hook", "whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3Q="))
    return webhook_id


def delete_subscription(conn: psycopg.Connection[Any], webhook_id: str) -> None:
    """Soft-delete it (the supported way): later fan-outs of its tenant skip it."""
    from onceonly_app.webhooks.subscriptions import delete

    delete(conn, webhook_id)


def rows(conn: psycopg.Connection[Any], query: str, *params: Any) -> list[dict[str, Any]]:
    return conn.execute(query, params).fetchall()


def invoice_effects(conn: psycopg.Connection[Any], tenant: str) -> dict[str, Any]:
    """What the jobs recorded for ``tenant``'s invoices."""
    def count(query: str) -> int:
        return int(conn.execute(query, (tenant,)).fetchone()["n"])

    return {
        "statuses": {r["status"]: r["n"] for r in rows(
            conn, "SELECT status, count(*) AS n FROM invoices WHERE tenant_id = %s GROUP BY status", tenant)},
        "history": rows(conn, "SELECT h.invoice_id, h.from_status, h.to_status, h.job, h.fence_token"
                              "  FROM invoice_status_history h JOIN invoices i ON i.id = h.invoice_id"
                              " WHERE i.tenant_id = %s ORDER BY h.invoice_id, h.id", tenant),
        "activity": count("SELECT count(*) AS n FROM activity_events WHERE tenant_id = %s"),
        "activity_keys": count("SELECT count(DISTINCT event_key) AS n FROM activity_events WHERE tenant_id = %s"),
        "notifications": count("SELECT count(*) AS n FROM notifications WHERE tenant_id = %s"),
    }


def generated_invoices(db_url: str, tenant: str, schedule_id: str) -> dict[str, Any]:
    """What recurring billing recorded: the schedule's period keys, and the
    tenant's activity events and e-mails."""
    with connect(db_url) as conn:
        periods = rows(conn, "SELECT period_key FROM invoices WHERE schedule_id = %s ORDER BY 1", schedule_id)
        effects = invoice_effects(conn, tenant)
    return {"periods": [p["period_key"] for p in periods], "activity": effects["activity"],
            "notifications": effects["notifications"]}


def notification_rows(conn: psycopg.Connection[Any], tenant: str) -> list[dict[str, Any]]:
    return rows(conn, "SELECT n.notification_key, n.recipient, n.status, n.attempts, n.last_error,"
                      "       (SELECT count(*) FROM notification_attempts a WHERE a.notification_id = n.id)"
                      "         AS attempt_rows,"
                      "       (SELECT count(*) FROM notification_attempts a WHERE a.notification_id = n.id"
                      "           AND a.outcome = 'sent') AS sent_rows"
                      "  FROM notifications n WHERE n.tenant_id = %s ORDER BY n.notification_key", tenant)


def ledger_read(conn: psycopg.Connection[Any], poller: str, until: datetime | str = "infinity", *,
                tenant: str) -> None:
    """The payment watcher ``poller`` has read the ledger up to ``until`` (default:
    all of it) on the feed of ``tenant``'s receiving account (one is added if
    the tenant has none), so the overdue job is not held back by it."""
    from onceonly_cli.testing.fake_payments import random_account

    account = conn.execute("SELECT account_id FROM payment_accounts WHERE tenant_id = %s ORDER BY 1 LIMIT 1",
                           (tenant,)).fetchone()
    if account is None:
        add_receiving_account(conn, tenant, account_id := random_account())
    else:
        account_id = account["account_id"]
    conn.execute("INSERT INTO payment_cursors (poller, cursor, fence_token, ledger_read_to) VALUES (%s, '', 0, %s)"
                 " ON CONFLICT (poller) DO UPDATE SET ledger_read_to = EXCLUDED.ledger_read_to",
                 (f"{poller}:{account_id}", until))
