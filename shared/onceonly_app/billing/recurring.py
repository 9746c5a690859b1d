"""The recurring-billing job: one invoice per schedule and period, including
every period a schedule missed (catch-up), never one per run. Idempotent by the
unique (schedule_id, period_key), so it needs no fence: a second generation,
concurrent or later, inserts nothing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from onceonly import Tick
from onceonly.stores.sqlfile import load_queries

from . import outbox

SQL = load_queries(Path(__file__).with_suffix(".sql"))
MAX_PERIODS_PER_RUN = 366  # per schedule; a longer gap is caught up over the next ticks


@dataclass(frozen=True)
class RecurringResult:
    generated: int


def run(pool: ConnectionPool, tick: Tick, *, tenant: str | None = None,
        max_periods: int = MAX_PERIODS_PER_RUN) -> RecurringResult:
    """Generate the invoices of every period that started on or before the
    tick's day (UTC), with their activity events and e-mails, in one transaction."""
    params = {"as_of": tick.scheduled_time.date(), "tenant": tenant, "max_periods": max_periods}
    with pool.connection() as conn, conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        created = cur.execute(SQL["generate_due_invoices"], params).fetchall()
        outbox.enqueue(conn, [outbox.new_invoice_email(row) for row in created])
    return RecurringResult(generated=len(created))
