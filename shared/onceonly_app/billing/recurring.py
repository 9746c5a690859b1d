"""The recurring-billing job: one invoice per schedule and period, including
every period a schedule missed (catch-up), never one per run. Idempotent by the
unique (schedule_id, period_key): a second generation, concurrent or later,
inserts nothing. Also fenced by the tick's token, like every job's writes, so a
run that lost its tick commits nothing at all (not even an invoice the newer
run has not reached yet, or one an operator removed since)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from onceonly import Tick
from onceonly.stores.sqlfile import load_queries

from . import outbox
from .ticks import TickFence

SQL = load_queries(Path(__file__).with_suffix(".sql"))
MAX_PERIODS_PER_RUN = 366  # per schedule; a longer gap is caught up over the next ticks


@dataclass(frozen=True)
class RecurringResult:
    generated: int


def run(pool: ConnectionPool, tick: Tick, *, tenant: str | None = None,
        max_periods: int = MAX_PERIODS_PER_RUN) -> RecurringResult:
    """Generate the invoices of every period that started on or before the
    tick's day (UTC), with their activity events and e-mails, in one transaction.
    Raises FencedError (a LeaseLostError) if a newer run of the tick stamped
    first: nothing is generated."""
    fence = TickFence(pool, tick)
    fence.stamp()
    params = {"as_of": tick.scheduled_time.date(), "tenant": tenant, "max_periods": max_periods}
    with fence.transaction() as conn, conn.cursor(row_factory=dict_row) as cur:
        created = cur.execute(SQL["generate_due_invoices"], params).fetchall()
        outbox.enqueue(conn, [outbox.new_invoice_email(row) for row in created])
    fence.finish({"generated": len(created)})
    return RecurringResult(generated=len(created))
