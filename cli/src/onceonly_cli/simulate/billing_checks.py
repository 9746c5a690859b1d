"""The billing scenarios the report judges beyond exactly-once, from the
database after the run: no invoice went overdue before its due day ended in its
tenant's time zone, no paused period was billed, no overdue e-mail went out
for an invoice already paid, and the money edge cases: an invoice paid exactly
by sub-cent parts is paid and not dunned, a zero invoice is never overdue, and
an invoice paid on time while the payments API was down across the overdue run
is not overdue. read_* read, judge_* decide (the tests feed them a bad state)."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
from psycopg.rows import dict_row

from .report import Invariant

# The zone an invoice was issued in, not its tenant's zone now: a zone change
# mid-run moves no promised date.
MOVED_OVERDUE = """
SELECT i.id, i.due_at, i.due_time_zone AS time_zone, i.status
  FROM invoices i
 WHERE EXISTS (SELECT 1 FROM invoice_status_history h WHERE h.invoice_id = i.id AND h.to_status = 'overdue')"""
PAUSE_WINDOWS = "SELECT schedule_id, paused_on, resumed_on FROM billing_schedule_pauses"
GENERATED = """
SELECT i.id, i.schedule_id, i.period_key, i.due_on, i.due_time_zone, s.due_days
  FROM invoices i JOIN billing_schedules s ON s.id = i.schedule_id"""
SEEDED_DUE_DAYS = "SELECT id, due_on FROM invoices WHERE id = ANY(%s)"
SCENARIO_INVOICES = """
SELECT i.id, i.status,
       (SELECT count(*) FROM invoice_status_history h WHERE h.invoice_id = i.id AND h.to_status = 'overdue')
         AS overdue_rows,
       (SELECT count(*) FROM notifications n WHERE n.invoice_id = i.id AND n.kind = 'invoice.overdue') AS dunning,
       (SELECT count(*) FROM payments p WHERE p.invoice_id = i.id AND p.late) AS late_payments
  FROM invoices i WHERE i.id = ANY(%s)"""
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
                     f"{left_open} due on the last run's local day left open", cases=bad)


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
        if windows else "no pause window seeded"), cases=bad)


def judge_due_from_issue(generated: list[dict[str, Any]], ticks: list[datetime]) -> Invariant:
    """Every generated invoice is due ``due_days`` after the day it was issued
    (one of the recurring ticks' days, in the zone it was issued in), or after
    its period start if that is later: an invoice issued late (a missed
    period's catch-up) is never born overdue."""
    def fits(g: dict[str, Any]) -> bool:
        period = date.fromisoformat(g["period_key"])
        days = {t.astimezone(ZoneInfo(g["due_time_zone"])).date() for t in ticks}
        return any(g["due_on"] == max(period, day) + timedelta(days=g["due_days"]) for day in days if day >= period)

    bad = [f"{g['id']} (period {g['period_key']}, {g['due_days']} days) due on {g['due_on']}" for g in generated
           if not fits(g)]
    late = sum(1 for g in generated if g["due_on"] > date.fromisoformat(g["period_key"]) + timedelta(g["due_days"]))
    return Invariant("due days count from the issue day", bool(late) and not bad, "; ".join(bad[:5]) or (
        f"{len(generated)} invoices generated, each due its due days after its issue day; {late} issued after "
        "their period started (catch-up), due from then" if late else "no invoice issued late"), cases=bad)


def judge_promised_dates(stored: list[dict[str, Any]], promised: dict[str, date]) -> Invariant:
    """Every seeded invoice still has the due date it was issued with, after
    the zone change mid-run."""
    bad = [f"{r['id']} due on {r['due_on']}, promised {promised[r['id']]}" for r in stored
           if r["due_on"] != promised[r["id"]]]
    missing = sorted(set(promised) - {r["id"] for r in stored})
    return Invariant("a zone change moves no promised due date", bool(stored) and not bad and not missing,
                     "; ".join((bad + [f"{m} missing" for m in missing])[:5]) or
                     f"{len(stored)} seeded invoices keep the due dates they were issued with", cases=bad)


def judge_overdue_emails(emails: list[dict[str, Any]]) -> Invariant:
    """An overdue e-mail of a paid invoice was cancelled, or sent before the
    payment was applied: never sent after it."""
    bad = [f"notification {e['id']} for {e['invoice_id']} sent {e['sent_at']}, after it was paid {e['paid_at']}"
           for e in emails if e["status"] == "sent" and (e["sent_at"] is None or e["sent_at"] > e["paid_at"])]
    cancelled = sum(1 for e in emails if e["status"] == "cancelled")
    return Invariant("no overdue e-mail for a paid invoice", not bad, "; ".join(bad[:5]) or
                     f"{len(emails)} overdue e-mails of paid invoices: {cancelled} cancelled at send time, "
                     f"{len(emails) - cancelled} sent before the payment", cases=bad)


def _not_dunned(name: str, invoices: list[dict[str, Any]], what: str, *, on_time: bool = False) -> Invariant:
    """Each of ``invoices`` (SCENARIO_INVOICES rows) ended `paid`, never moved to
    overdue, got no overdue e-mail, and (``on_time``) no payment of it is late."""
    bad = [f"{i['id']} {i['status']}, {i['overdue_rows']} overdue moves, {i['dunning']} overdue e-mails"
           + (f", {i['late_payments']} late payments" if on_time else "") for i in invoices
           if i["status"] != "paid" or i["overdue_rows"] or i["dunning"] or (on_time and i["late_payments"])]
    return Invariant(name, bool(invoices) and not bad, "; ".join(bad[:5]) or (
        f"{len(invoices)} {what}: each paid, never overdue, never dunned" if invoices else "none seeded"), cases=bad)


def judge_exactly_paid(invoices: list[dict[str, Any]]) -> Invariant:
    return _not_dunned("sub-cent parts pay exactly", invoices, "invoices paid by sub-cent parts that add up")


def judge_zero_invoices(invoices: list[dict[str, Any]]) -> Invariant:
    return _not_dunned("zero invoice never overdue", invoices, "zero invoices")


def judge_paid_during_outage(invoices: list[dict[str, Any]]) -> Invariant:
    return _not_dunned("no dunning of an on-time payment seen late", invoices,
                       "invoices paid on their due day while the payments API was down across the overdue run",
                       on_time=True)


def billing_invariants(conn: psycopg.Connection[Any], last_overdue_tick: datetime | None,
                       left_open: int, scenarios: dict[str, list[str]], *, promised: dict[str, date] | None = None,
                       recurring_ticks: list[datetime] | None = None) -> list[Invariant]:
    """``scenarios``: the seeded scenario invoices' ids by kind ("zero",
    "sub-cent", "outage"); a kind left out is not judged (its job is absent).
    ``promised``: the seeded invoices' due dates; ``recurring_ticks``: the
    recurring job's ticks; either None: not judged (nothing seeded, the job is absent)."""
    with conn.cursor(row_factory=dict_row) as cur:
        moved = cur.execute(MOVED_OVERDUE).fetchall()
        windows = cur.execute(PAUSE_WINDOWS).fetchall()
        generated = cur.execute(GENERATED).fetchall()
        emails = cur.execute(OVERDUE_EMAILS).fetchall()
        rows = {r["id"]: r for r in cur.execute(SCENARIO_INVOICES, (sorted(sum(scenarios.values(), [])),))}
        stored = cur.execute(SEEDED_DUE_DAYS, (sorted(promised or {}),)).fetchall()
    judged = [judge_pauses(generated, windows), judge_overdue_emails(emails)]
    if promised is not None:
        judged.append(judge_promised_dates(stored, promised))
    if recurring_ticks:
        judged.append(judge_due_from_issue(generated, recurring_ticks))
    if last_overdue_tick is not None:
        judged.insert(0, judge_due_days(moved, last_overdue_tick, left_open))
    for kind, judge in (("sub-cent", judge_exactly_paid), ("zero", judge_zero_invoices),
                        ("outage", judge_paid_during_outage)):
        if kind in scenarios:
            judged.append(judge([rows[i] for i in scenarios[kind] if i in rows]))
    return judged
