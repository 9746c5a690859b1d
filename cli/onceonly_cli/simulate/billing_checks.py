"""The billing scenarios the report judges beyond exactly-once, from the
database after the run: no invoice went overdue before its due day ended in its
tenant's time zone, no paused period was billed, and no overdue e-mail went out
for an invoice already paid. read_* read, judge_* decide (the tests feed them
a bad state)."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
from psycopg.rows import dict_row

from .report import Invariant

MOVED_OVERDUE = """
SELECT i.id, i.due_at, coalesce(t.time_zone, 'UTC') AS time_zone, i.status
  FROM invoices i LEFT JOIN billing_tenants t ON t.tenant_id = i.tenant_id
 WHERE EXISTS (SELECT 1 FROM invoice_status_history h WHERE h.invoice_id = i.id AND h.to_status = 'overdue')"""
PAUSE_WINDOWS = "SELECT schedule_id, paused_on, resumed_on FROM billing_schedule_pauses"
GENERATED = "SELECT id, schedule_id, period_key FROM invoices WHERE schedule_id IS NOT NULL"
OVERDUE_EMAILS = """
SELECT n.id, n.invoice_id, n.status, n.sent_at, h.changed_at AS paid_at
  FROM notifications n
  JOIN invoice_status_history h ON h.invoice_id = n.invoice_id AND h.to_status = 'paid'
 WHERE n.kind = 'invoice.overdue'"""


def due_day_end(due_at: datetime, zone: str) -> datetime:
    """Midnight after the due day, the due day being ``due_at``'s date in ``zone``."""
    tz = ZoneInfo(zone)
    return datetime.combine(due_at.astimezone(tz).date() + timedelta(days=1), time(), tz)


def judge_due_days(moved: list[dict[str, Any]], last_tick: datetime, left_open: int) -> Invariant:
    """Every invoice moved to overdue had its due day ended, in its tenant's
    time zone, by the overdue job's last tick (no run judges a later time).
    ``left_open``: seeded invoices due on that tick's local day."""
    bad = [f"{m['id']} ({m['time_zone']}) overdue, its due day ends {due_day_end(m['due_at'], m['time_zone'])}"
           for m in moved if due_day_end(m["due_at"], m["time_zone"]) > last_tick]
    zones = ", ".join(sorted({m["time_zone"] for m in moved}))
    return Invariant("no overdue before the due day ended", not bad, "; ".join(bad[:5]) or
                     f"{len(moved)} invoices moved, each after its due day ended in its tenant's zone ({zones}); "
                     f"{left_open} due on the last run's local day left open")


def judge_pauses(generated: list[dict[str, Any]], windows: list[dict[str, Any]]) -> Invariant:
    """No generated invoice is for a period that started inside a pause window
    [paused_on, resumed_on) of its schedule."""
    def paused(schedule_id: str, day: date) -> bool:
        return any(w["schedule_id"] == schedule_id and w["paused_on"] <= day
                   and (w["resumed_on"] is None or day < w["resumed_on"]) for w in windows)

    bad = [f"{g['id']}: {g['schedule_id']} billed {g['period_key']}, a paused period" for g in generated
           if paused(g["schedule_id"], date.fromisoformat(g["period_key"]))]
    return Invariant("paused periods not billed", bool(windows) and not bad, "; ".join(bad[:5]) or (
        f"{len(generated)} invoices generated, none for a period inside the {len(windows)} pause windows"
        if windows else "no pause window seeded"))


def judge_overdue_emails(emails: list[dict[str, Any]]) -> Invariant:
    """An overdue e-mail of a paid invoice was cancelled, or sent before the
    payment was applied: never sent after it."""
    bad = [f"notification {e['id']} for {e['invoice_id']} sent {e['sent_at']}, after it was paid {e['paid_at']}"
           for e in emails if e["status"] == "sent" and (e["sent_at"] is None or e["sent_at"] > e["paid_at"])]
    cancelled = sum(1 for e in emails if e["status"] == "cancelled")
    return Invariant("no overdue e-mail for a paid invoice", not bad, "; ".join(bad[:5]) or
                     f"{len(emails)} overdue e-mails of paid invoices: {cancelled} cancelled at send time, "
                     f"{len(emails) - cancelled} sent before the payment")


def billing_invariants(conn: psycopg.Connection[Any], last_overdue_tick: datetime | None,
                       left_open: int) -> list[Invariant]:
    with conn.cursor(row_factory=dict_row) as cur:
        moved = cur.execute(MOVED_OVERDUE).fetchall()
        windows = cur.execute(PAUSE_WINDOWS).fetchall()
        generated = cur.execute(GENERATED).fetchall()
        emails = cur.execute(OVERDUE_EMAILS).fetchall()
    judged = [judge_pauses(generated, windows), judge_overdue_emails(emails)]
    if last_overdue_tick is not None:
        judged.insert(0, judge_due_days(moved, last_overdue_tick, left_open))
    return judged
