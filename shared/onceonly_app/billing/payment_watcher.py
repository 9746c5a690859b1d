"""The payment watcher: poll the payments API from the stored cursor and apply
each payment once.

- One active poller at a time: a job-wide lease (``poller:JOB``) on the
  coordination store, separate from the per-minute tick lock, so a slow run of
  one tick and the next tick's run cannot poll together.
- The cursor advances only under the poller's current token: each page's
  payments and the new cursor commit in one transaction that first locks the
  cursor row with that token (payment_watcher.sql).
- Each payment is applied once (the transaction hash is the key); the invoice
  it pays moves to `paid`, and an ``invoice.paid`` event per subscription goes
  to the webhook outbox in the same transaction, sent to SQS afterwards.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from onceonly import Lease, Tick
from onceonly.stores.sqlfile import load_queries

from . import webhook_events
from .payments_api import Page, Payment
from .ticks import FencedError

SQL = load_queries(Path(__file__).with_suffix(".sql"))


class PaymentSource(Protocol):
    def page(self, cursor: str, limit: int = 200) -> Page: ...


@dataclass
class WatchResult:
    status: str = "polled"  # or "poller-busy": another run holds the poller lease
    pages: int = 0
    payments_applied: int = 0
    invoices_paid: int = 0
    cursor: str | None = None
    webhooks: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def poller_lease_name(job: str) -> str:
    return f"poller:{job}"


def run(pool: ConnectionPool, tick: Tick, source: PaymentSource, sqs: Any, queue_url: str, *,
        poller_ttl: float, page_limit: int = 200, max_pages: int = 50, tenant: str | None = None,
        log: Any = None) -> WatchResult:
    """Poll and apply up to ``max_pages`` pages, then send the webhook outbox
    (also what earlier runs left unsent). Raises LeaseLostError (FencedError) if
    a newer poller took over; what this run committed before stands."""
    store = tick.store
    lease = store.acquire(poller_lease_name(tick.job), ttl=poller_ttl)
    if lease is None:
        result = WatchResult(status="poller-busy")
    else:
        try:
            result = _poll(pool, tick, source, lease, poller_ttl, page_limit, max_pages)
        finally:
            store.release(lease)  # False if it was lost meanwhile: nothing to give back
    result.webhooks = asdict(webhook_events.flush(pool, sqs, queue_url, tenant=tenant, log=log))
    return result


def _poll(pool: ConnectionPool, tick: Tick, source: PaymentSource, lease: Lease, poller_ttl: float,
          page_limit: int, max_pages: int) -> WatchResult:
    poller = tick.job
    fence = {"poller": poller, "token": lease.token}
    with pool.connection() as conn, conn.transaction():
        row = conn.execute(SQL["stamp_cursor"], fence).fetchone()
    if row is None:
        raise FencedError(f"poller {poller}: a poller with a newer token than {lease.token} stamped the cursor")
    result = WatchResult(cursor=row[0])
    while result.pages < max_pages:
        page = source.page(result.cursor or "", page_limit)
        with pool.connection() as conn, conn.transaction():
            if conn.execute(SQL["hold_cursor"], fence).fetchone() is None:
                raise FencedError(f"poller {poller}: cursor refused to token {lease.token}, a newer poller "
                                  "took over")
            for payment in page.payments:
                _apply(conn, payment, poller, lease.token, result)
            conn.execute(SQL["advance_cursor"], {**fence, "cursor": page.next_cursor})
        result.pages += 1
        result.cursor = page.next_cursor
        if len(page.payments) < page_limit:
            break
        lease = tick.store.renew(lease, ttl=poller_ttl)  # LeaseLostError: stop, the newer poller goes on
        tick.renew()
    return result


def _apply(conn: psycopg.Connection[Any], payment: Payment, poller: str, token: int,
           result: WatchResult) -> None:
    with conn.cursor(row_factory=dict_row) as cur:
        recorded = cur.execute(SQL["record_payment"], {**asdict(payment), "poller": poller,
                                                       "token": token}).fetchone()
        if recorded is None:
            return  # applied before
        result.payments_applied += 1
        if recorded["invoice_id"] is None:
            return
        paid = cur.execute(SQL["mark_paid"], {"invoice_id": recorded["invoice_id"], "job": poller,
                                              "token": token}).fetchone()
    if paid is None:
        return
    result.invoices_paid += 1
    payload = {"invoice_id": paid["id"], "tenant_id": paid["tenant_id"], "amount_cents": paid["amount_cents"],
               "currency": paid["currency"], "paid_at": paid["paid_at"].isoformat(),
               "transaction_hash": payment.transaction_hash}
    webhook_events.fan_out(conn, webhook_events.invoice_paid_event_id(payment.transaction_hash),
                           "invoice.paid", paid["tenant_id"], payload)

