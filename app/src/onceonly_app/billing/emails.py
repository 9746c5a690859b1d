"""The e-mail outbox: notifications are written in the transaction of the
change they report, with a unique key, and sent later by the notifications job.
(The webhook events' outbox is onceonly_app.events.outbox.)"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path
from typing import Any

import psycopg

from onceonly_app.sql_queries import load_queries

from .money import due_money, format_money

SQL = load_queries(Path(__file__).with_suffix(".sql"))


@dataclass(frozen=True)
class Email:
    notification_key: str  # unique: "KIND:INVOICE"
    tenant_id: str
    invoice_id: str | None
    kind: str
    recipient: str
    subject: str
    body_text: str


def overdue_email(invoice: Mapping[str, Any]) -> Email:
    """``credited_cents``: what payments already cover (exact); after a partial
    payment the e-mail states what is still due, rounded up (money.py)."""
    due: date = invoice["due_on"]  # the due day in the tenant's time zone
    total = format_money(invoice["amount_cents"], invoice["currency"])
    credited = invoice["credited_cents"]
    still_due = "" if not credited else (
        f" {due_money(invoice['amount_cents'] - credited, invoice['currency'])} of {total} is still due "
        f"({format_money(credited, invoice['currency'])} received).")
    return Email(
        notification_key=f"invoice.overdue:{invoice['id']}",
        tenant_id=invoice["tenant_id"],
        invoice_id=invoice["id"],
        kind="invoice.overdue",
        recipient=invoice["customer_email"],
        subject=f"Invoice {invoice['id']} is overdue",
        body_text=f"Invoice {invoice['id']} for {total} was due on {due:%Y-%m-%d} and is now overdue.{still_due}",
    )


def new_invoice_email(invoice: Mapping[str, Any]) -> Email:
    due: date = invoice["due_on"]
    return Email(
        notification_key=f"invoice.created:{invoice['id']}",
        tenant_id=invoice["tenant_id"],
        invoice_id=invoice["id"],
        kind="invoice.created",
        recipient=invoice["customer_email"],
        subject=f"New invoice {invoice['id']}",
        body_text=(f"Invoice {invoice['id']} for {format_money(invoice['amount_cents'], invoice['currency'])} "
                   f"(period starting {invoice['period_key']}) "
                   + ("is settled: nothing is due." if invoice["amount_cents"] == 0 else f"is due on {due:%Y-%m-%d}.")),
    )


def enqueue(conn: psycopg.Connection[Any], emails: Sequence[Email]) -> None:
    """Add ``emails`` to the outbox inside the caller's transaction."""
    if emails:
        with conn.cursor() as cur:
            cur.executemany(SQL["enqueue"], [asdict(e) for e in emails])
