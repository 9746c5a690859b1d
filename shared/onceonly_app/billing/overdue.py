"""The overdue-invoices job: open invoices whose due day ended (in the tenant's
time zone) before the tick's scheduled time move to `overdue`, each with one
status-history row, one activity event and one e-mail in the outbox, all in
the transition's transaction and fenced by the tick's token."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from onceonly import Tick
from onceonly.stores.sqlfile import load_queries

from ..budget import Budget
from . import outbox
from .fenced_batches import run_fenced_batches

SQL = load_queries(Path(__file__).with_suffix(".sql"))
BATCH_SIZE = 500


@dataclass(frozen=True)
class OverdueResult:
    transitioned: int
    batches: int


def run(pool: ConnectionPool, tick: Tick, *, tenant: str | None = None, batch_size: int = BATCH_SIZE,
        budget: Budget | None = None) -> OverdueResult:
    """Transition every open invoice whose due day ended before the tick's time.
    Raises FencedError (a LeaseLostError) if a newer run of the tick took over:
    the batch in progress is rolled back; batches committed earlier stand, and
    the newer run finds those invoices already moved. Raises RunOutOfTimeError
    when the budget runs low with batches left: the retry of the tick goes on."""
    params = {"as_of": tick.scheduled_time, "tenant": tenant, "job": tick.job, "token": tick.token,
              "limit": batch_size}

    def batch(conn: psycopg.Connection[Any]) -> tuple[int, bool]:
        with conn.cursor(row_factory=dict_row) as cur:
            moved = cur.execute(SQL["transition_overdue"], params).fetchall()
        outbox.enqueue(conn, [outbox.overdue_email(row) for row in moved])
        return len(moved), len(moved) == batch_size

    done = run_fenced_batches(pool, tick, batch, budget=budget,
                              result_key="transitioned")
    return OverdueResult(transitioned=done.done, batches=done.batches)
