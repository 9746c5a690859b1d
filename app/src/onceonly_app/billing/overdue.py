"""The overdue-invoices job: open invoices whose due day ended (in the tenant's
time zone) before the tick's scheduled time, and before the ledger time the
payment watcher has read up to, move to `overdue`, each with one status-history
row, one activity event, one e-mail in the outbox (stating what is still due)
and one ``invoice.overdue`` webhook event (events.outbox.fan_out), all in the
transition's transaction and fenced by the tick's token."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from onceonly import Tick
from onceonly_app.events import outbox
from onceonly_app.events.types import invoice_event_id
from onceonly_app.sql_queries import load_queries

from ..runtime.budget import Budget
from . import emails
from .fenced_batches import run_fenced_batches

SQL = load_queries(Path(__file__).with_suffix(".sql"))
BATCH_SIZE = 500
# A feed that is up to date still reads the ledger up to a minute or so behind
# the clock: an invoice whose due day ended within this is held but not counted.
HELD_GRACE_SECONDS = 600.0


def overdue_payload(row: dict[str, Any]) -> dict[str, Any]:
    """The ``invoice.overdue`` event's data: the invoice, its due day, and its
    money as the e-mail states it (``amount_due``, ``amount_paid``,
    ``amount_remaining`` in whole minor units: billing_invoice_amounts)."""
    return {"invoice_id": row["id"], "tenant_id": row["tenant_id"], "amount_cents": row["amount_cents"],
            "currency": row["currency"], "due_at": row["due_at"].isoformat(), "due_on": row["due_on"].isoformat(),
            **row["amounts"]}


@dataclass(frozen=True)
class OverdueResult:
    transitioned: int
    batches: int
    held: int  # due day ended, but the payment watcher has not read the ledger that far: not dunned yet


def run(pool: ConnectionPool, tick: Tick, *, watcher: str, tenant: str | None = None,
        batch_size: int = BATCH_SIZE, budget: Budget | None = None) -> OverdueResult:
    """Transition every open invoice whose due day ended before the tick's time
    and before what the payment watcher ``watcher`` (its poller name) has read
    of the ledger: an invoice it has not read that far for waits for a later run.
    Raises FencedError (a LeaseLostError) if a newer run of the tick took over:
    the batch in progress is rolled back; batches committed earlier stand, and
    the newer run finds those invoices already moved. Raises RunOutOfTimeError
    when the budget runs low with batches left: the retry of the tick goes on."""
    params = {"as_of": tick.scheduled_time, "tenant": tenant, "watcher": watcher, "job": tick.job,
              "token": tick.token, "limit": batch_size, "grace": HELD_GRACE_SECONDS}

    def batch(conn: psycopg.Connection[Any]) -> tuple[int, bool]:
        with conn.cursor(row_factory=dict_row) as cur:
            moved = cur.execute(SQL["transition_overdue"], params).fetchall()
        emails.enqueue(conn, [emails.overdue_email(row) for row in moved])
        for row in moved:
            outbox.fan_out(conn, invoice_event_id("invoice.overdue", row["id"]),
                                   "invoice.overdue", row["tenant_id"], overdue_payload(row))
        return len(moved), len(moved) == batch_size

    done = run_fenced_batches(pool, tick, batch, budget=budget,
                              result_key="transitioned")
    with pool.connection() as conn:
        (held,) = conn.execute(SQL["held_for_payments"], params).fetchone() or (0,)
    return OverdueResult(transitioned=done.done, batches=done.batches, held=held)
