"""The recurring-billing job: one invoice per schedule and period, including
every period a schedule missed (catch-up), never one per run, and none for a
period that started while the schedule was paused.

The work goes in bounded batches (``schedules`` schedules, ``max_periods``
periods each), each one transaction fenced by the tick's token: a long
catch-up commits as it goes, a run near its deadline stops between batches
(RunOutOfTimeError: the tick's retry continues from the high-water marks), and
a run paused past its lease commits nothing once a newer run stamped. The
unique (schedule_id, period_key) keeps a second generation a no-op."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from onceonly import Tick
from onceonly_app.sql_queries import load_queries

from ..runtime.budget import Budget
from . import emails
from .fenced_batches import run_fenced_batches

SQL = load_queries(Path(__file__).with_suffix(".sql"))
SCHEDULES_PER_BATCH = 200
PERIODS_PER_BATCH = 31  # per schedule; a longer gap continues in the next batch


@dataclass(frozen=True)
class RecurringResult:
    generated: int
    batches: int


def run(pool: ConnectionPool, tick: Tick, *, tenant: str | None = None, schedules: int = SCHEDULES_PER_BATCH,
        max_periods: int = PERIODS_PER_BATCH, budget: Budget | None = None) -> RecurringResult:
    """Generate the invoices of every period that started on or before the
    tick's day in its tenant's time zone (a period starts at local midnight),
    with their activity events and e-mails. Raises
    FencedError if a newer run of the tick stamped, RunOutOfTimeError if the
    budget ran low with periods still due."""
    params = {"as_of": tick.scheduled_time, "tenant": tenant, "schedules": schedules,
              "max_periods": max_periods}

    def batch(conn: psycopg.Connection[Any]) -> tuple[int, bool]:
        with conn.cursor(row_factory=dict_row) as cur:
            created = cur.execute(SQL["generate_batch"], params).fetchall()
            emails.enqueue(conn, [emails.new_invoice_email(row) for row in created])
            more = cur.execute(SQL["any_due"], params).fetchone() is not None
        return len(created), more

    done = run_fenced_batches(pool, tick, batch, budget=budget,
                              result_key="generated")
    return RecurringResult(generated=done.done, batches=done.batches)
