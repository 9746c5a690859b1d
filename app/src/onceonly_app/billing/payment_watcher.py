"""The payment watcher: poll the payments API from the stored cursor and apply
each payment once.

- One active poller at a time: a job-wide lease (``poller:JOB``) on the
  coordination store, separate from the per-minute tick lock, so a slow run of
  one tick and the next tick's run cannot poll together.
- The cursor advances only under the poller's current token: each page's
  payments and the new cursor commit in one transaction that first locks the
  cursor row with that token (payment_watcher.sql).
- Only payments TO a receiving account (payment_accounts) count; the memo is
  matched against that account's tenant's invoices only. Other records
  (outgoing payments, create_account, account_merge, failed transactions) are
  skipped and the cursor moves past them.
- Each payment operation is recorded once (the operation id is the key), with
  its verdict (matching.py). A credited payment that covers its invoice moves
  it to `paid` (paid_at: the payment's ledger time), and an ``invoice.paid``
  event goes to the webhook outbox in the same transaction. Unmatched, partial,
  overpaid and late payments get an activity event and a count in the result.
  Late means by ledger time: paid at or after the end of the invoice's due day.
- Each receiving account is its own feed (``{api}/accounts/{account}/payments``)
  with its own cursor row (``JOB:ACCOUNT``, cursor_name) and its own hold: a
  feed applies the payments TO its account. With the cursor, each page records
  the ledger time it was read up to (payments_api.Page.read_to: never past the
  source's own ingestion point); the overdue job dunns a tenant's invoice only
  once its due day ended before what EVERY feed of the tenant's accounts has
  read, so an on-time payment the watcher has not seen yet (the API down or
  lagging, the watcher behind) is never dunned, and a tenant with no account
  is never dunned at all. How far each feed's source lags is reported
  (``feed_lag_seconds``, the worst of the run).
- The outbox is sent to SQS after polling, whatever polling did (succeeded,
  failed, or found the poller busy): events committed earlier never wait on
  the payments API.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from onceonly import Lease, Tick
from onceonly_app.events import outbox
from onceonly_app.events.types import invoice_paid_event_id, payment_event_id
from onceonly_app.sql_queries import load_queries

from ..runtime.aws import CALL_SECONDS
from ..runtime.budget import Budget
from .assets import AcceptedAssets
from .matching import Verdict, judge
from .payments_api import READ_TIMEOUT, Page, Payment
from .ticks import FencedError

SQL = load_queries(Path(__file__).with_suffix(".sql"))
PAGE_SECONDS = READ_TIMEOUT  # the longest one page request may take


class PaymentSource(Protocol):
    def page(self, cursor: str, limit: int = 200, *, timeout: float | None = None,
             account: str | None = None) -> Page: ...


def cursor_name(job: str, account: str) -> str:
    """The cursor row (payment_cursors.poller) of ``account``'s feed; the overdue
    job finds a tenant's feeds by this name (billing_tenant_read_to)."""
    return f"{job}:{account}"


@dataclass
class WatchResult:
    status: str = "polled"  # or "poller-busy": another run holds the poller lease
    pages: int = 0
    payments_applied: int = 0  # payments recorded for the first time (credited or not)
    invoices_paid: int = 0
    unmatched: int = 0
    partial: int = 0
    overpaid: int = 0
    late: int = 0
    skipped: int = 0  # records that are not payments to a receiving account
    out_of_time: bool = False  # stopped polling near the invocation's deadline
    cursor: str | None = None  # the last feed's cursor
    feeds: int = 0  # receiving accounts polled
    feed_lag_seconds: float | None = None  # the worst lag of a feed's source behind its clock (None: none stated)
    webhooks: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def count(self, verdict: Verdict) -> None:
        self.payments_applied += 1
        if verdict.outcome in ("unmatched", "partial", "overpaid"):
            setattr(self, verdict.outcome, getattr(self, verdict.outcome) + 1)
        self.late += verdict.late


@dataclass(frozen=True)
class Poll:
    """What one run polls with."""

    source: PaymentSource
    accepted: AcceptedAssets
    poller_ttl: float
    page_limit: int = 200
    max_pages: int = 50


def poller_lease_name(job: str) -> str:
    return f"poller:{job}"


def run(pool: ConnectionPool, tick: Tick, poll: Poll, sqs: Any, queue_url: str, *,
        tenant: str | None = None, budget: Budget | None = None, log: Any = None) -> WatchResult:
    """Poll and apply up to ``poll.max_pages`` pages while the budget allows,
    then send the webhook outbox (also what earlier runs left unsent), even if
    polling raised. Raises what polling raised: PaymentsApiError, or
    LeaseLostError (FencedError) if a newer poller took over; what this run
    committed before stands."""
    budget = budget or Budget.unlimited()
    result = WatchResult(status="poller-busy")  # what is reported if another run holds the poller lease
    try:
        lease = tick.store.acquire(poller_lease_name(tick.job), ttl=poll.poller_ttl)
        if lease is not None:
            try:
                result = _poll(pool, tick, poll, lease, tenant, budget, log)
            finally:
                tick.store.release(lease)  # False if it was lost meanwhile: nothing to give back
    finally:
        result.webhooks = asdict(outbox.flush(pool, sqs, queue_url, tenant=tenant, budget=budget,
                                                      log=log))
    return result


def _poll(pool: ConnectionPool, tick: Tick, poll: Poll, lease: Lease, tenant: str | None, budget: Budget,
          log: Any) -> WatchResult:
    with pool.connection() as conn, conn.transaction():
        accounts: dict[str, str] = dict(conn.execute(SQL["receiving_accounts"], {"tenant": tenant}).fetchall())
        cursors = {}
        for account in sorted(accounts):
            fence = {"poller": cursor_name(tick.job, account), "token": lease.token}
            row = conn.execute(SQL["stamp_cursor"], fence).fetchone()
            if row is None:
                raise FencedError(f"poller {fence['poller']}: a poller with a newer token than {lease.token} "
                                  "stamped the cursor")
            cursors[account] = row[0]
    result = WatchResult()
    for account, cursor in cursors.items():
        lease = _poll_feed(pool, tick, poll, lease, account, accounts[account], cursor, result, budget, log)
        if result.out_of_time or result.pages >= poll.max_pages:
            break
    return result


def _poll_feed(pool: ConnectionPool, tick: Tick, poll: Poll, lease: Lease, account: str, tenant: str, cursor: str,
               result: WatchResult, budget: Budget, log: Any) -> Lease:
    """Poll ``account``'s feed from ``cursor`` until it is read to its end (or
    the run's pages or time run out); returns the poller lease as last renewed."""
    fence = {"poller": cursor_name(tick.job, account), "token": lease.token}
    applier = {"poller": tick.job, "token": lease.token}  # recorded with each payment and transition
    result.feeds += 1
    result.cursor = cursor
    while result.pages < poll.max_pages:
        if result.pages:  # the run goes on: LeaseLostError stops it, the newer poller goes on
            lease = tick.store.renew(lease, ttl=poll.poller_ttl)
            tick.renew()
        timeout = budget.timeout(PAGE_SECONDS, keep=CALL_SECONDS)  # and time to send the outbox after
        if timeout is None:
            result.out_of_time = True
            break
        page = poll.source.page(result.cursor or "", poll.page_limit, timeout=timeout, account=account)
        if page.lag is not None:
            lag = page.lag.total_seconds()
            result.feed_lag_seconds = max(lag, result.feed_lag_seconds or 0.0)
        with pool.connection() as conn, conn.transaction():
            if conn.execute(SQL["hold_cursor"], fence).fetchone() is None:
                raise FencedError(f"poller {fence['poller']}: cursor refused to token {lease.token}, a newer "
                                  "poller took over")
            result.skipped += page.skipped
            for payment in page.payments:
                if payment.to_account != account:
                    result.skipped += 1  # sent from this account (a payment to another of ours is in its feed)
                    continue
                _apply(conn, payment, tenant, poll.accepted, applier, result, log)
            conn.execute(SQL["advance_cursor"], {**fence, "cursor": page.next_cursor, "read_to": page.read_to})
        result.pages += 1
        result.cursor = page.next_cursor
        if not page.full:
            break
    return lease


def _apply(conn: psycopg.Connection[Any], payment: Payment, tenant: str, accepted: AcceptedAssets,
           applier: dict[str, Any], result: WatchResult, log: Any) -> None:
    memo = payment.memo.strip() if payment.memo else None  # matched trimmed and case-folded (lock_invoice)
    with conn.cursor(row_factory=dict_row) as cur:
        invoice = cur.execute(SQL["lock_invoice"], {"memo": memo, "tenant": tenant}).fetchone() if memo else None
        verdict = judge(payment.amount, accepted.currency_of(payment.asset), memo, invoice, payment.created_at)
        recorded = cur.execute(SQL["record_payment"], {
            "payment_id": payment.payment_id, "transaction_hash": payment.transaction_hash,
            "paging_token": payment.paging_token, "operation_type": payment.operation_type,
            "to_account": payment.to_account, "tenant": tenant, "asset_code": payment.asset.code or "native",
            "asset_issuer": payment.asset.issuer, "amount": payment.amount, "amount_cents": verdict.amount_cents,
            "memo": payment.memo, "invoice_id": verdict.invoice_id, "outcome": verdict.outcome,
            "reason": verdict.reason, "late": verdict.late, "poller": applier["poller"], "token": applier["token"],
            "paid_at": payment.created_at}).fetchone()
        if recorded is None:
            return  # recorded before
        result.count(verdict)
        if verdict.event_kind is not None:
            _record_event(cur, payment, tenant, verdict, log)
        if verdict.outcome not in ("settled", "overpaid"):
            paid = None
        else:
            paid = cur.execute(SQL["mark_paid"], {"invoice_id": verdict.invoice_id, "paid_at": payment.created_at,
                                                  "job": applier["poller"], "token": applier["token"]}).fetchone()
    if paid is not None:
        result.invoices_paid += 1
        payload = {"invoice_id": paid["id"], "tenant_id": paid["tenant_id"], "amount_cents": paid["amount_cents"],
                   "currency": paid["currency"], "paid_at": paid["paid_at"].isoformat(),
                   "payment_id": payment.payment_id, "transaction_hash": payment.transaction_hash,
                   "overpaid": paid["overpaid"], **paid["amounts"]}
        outbox.fan_out(conn, invoice_paid_event_id(paid["id"]), "invoice.paid",
                               paid["tenant_id"], payload)
    if verdict.outcome in ("unmatched", "overpaid"):
        event_type = f"payment.{verdict.outcome}"
        outbox.fan_out(conn, payment_event_id(event_type, payment.payment_id), event_type,
                               tenant, payment_payload(payment, tenant, verdict))


def payment_payload(payment: Payment, tenant: str, verdict: Verdict) -> dict[str, Any]:
    """A ``payment.unmatched`` or ``payment.overpaid`` event's data: the payment
    as received (exact amount, asset, memo as sent) and why it needs the
    merchant (``reason``: unknown_invoice, no_memo, asset_not_accepted,
    wrong_currency, invoice_paid, …; None when it was credited)."""
    return {"payment_id": payment.payment_id, "transaction_hash": payment.transaction_hash, "tenant_id": tenant,
            "to_account": payment.to_account, "asset": str(payment.asset), "amount": str(payment.amount),
            "memo": payment.memo, "invoice_id": verdict.invoice_id, "reason": verdict.reason,
            "paid_at": payment.created_at.isoformat()}


def _record_event(cur: psycopg.Cursor[Any], payment: Payment, tenant: str, verdict: Verdict, log: Any) -> None:
    detail = {"payment_id": payment.payment_id, "transaction_hash": payment.transaction_hash,
              "asset": str(payment.asset), "amount": str(payment.amount),
              "amount_cents": None if verdict.amount_cents is None else str(verdict.amount_cents),  # exact
              "memo": payment.memo, "reason": verdict.reason, "late": verdict.late}
    cur.execute(SQL["record_payment_event"], {"kind": verdict.event_kind, "payment_id": payment.payment_id,
                                              "tenant": tenant, "invoice_id": verdict.invoice_id,
                                              "detail": json.dumps(detail)})
    if log is not None and verdict.outcome == "unmatched":
        log.warning("payment not credited", extra={"payment_id": payment.payment_id, "reason": verdict.reason,
                                                   "tenant_id": tenant})
