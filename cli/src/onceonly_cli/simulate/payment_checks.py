"""Was each payment applied to the right invoice, in the right asset, once?
Judged from the database after the run (the ``payments`` rows the watcher
wrote, the invoices, the receiving accounts) against what payments_load.py
seeded; read_facts reads, the judge_* functions decide, so the tests can feed
them a bad state."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import psycopg
from psycopg.rows import dict_row

from .report import Invariant

PAYMENT_ROWS = """
SELECT payment_id, transaction_hash, tenant_id, to_account, asset_code, asset_issuer, memo, invoice_id, outcome, reason
  FROM payments"""
INVOICE_ROWS = """
SELECT i.id, i.tenant_id, i.currency, i.status,
       (SELECT count(*) FROM invoice_status_history h WHERE h.invoice_id = i.id AND h.to_status = 'paid') AS paid_rows
  FROM invoices i WHERE i.id = ANY(%s)"""
ACCOUNTS = "SELECT account_id, tenant_id FROM payment_accounts"


@dataclass(frozen=True)
class SeededPayment:
    """One payment operation put in the payments API."""

    payment_id: str  # the operation id: the key the watcher records it under
    transaction_hash: str
    memo: str
    amount_cents: Decimal | int  # exact: a part may be a fraction of a cent
    tenant: str | None  # whose account it went to; None: not a receiving account of ours (skipped)
    reason: str | None  # None: credited; else the unmatched reason expected, or "skipped"
    operations: int  # payment operations in its transaction
    pays: str | None  # the invoice this operation completes, if any


@dataclass
class PaymentFacts:
    rows: dict[str, dict[str, Any]]  # payment_id -> its payments row
    invoices: dict[str, dict[str, Any]]  # invoice id -> id, tenant_id, currency, status, paid_rows
    accounts: dict[str, str]  # receiving account -> tenant


def names(memo: str | None, invoice_id: str | None) -> bool:
    """Whether ``memo`` names ``invoice_id``: memos are matched trimmed and case-folded."""
    return memo is not None and invoice_id is not None and memo.strip().lower() == invoice_id.lower()


def read_facts(conn: psycopg.Connection[Any], seeded: list[SeededPayment]) -> PaymentFacts:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = {r["payment_id"]: r for r in cur.execute(PAYMENT_ROWS)}
        memos = sorted({p.memo for p in seeded} | {str(r["invoice_id"]) for r in rows.values() if r["invoice_id"]})
        invoices = {r["id"]: r for r in cur.execute(INVOICE_ROWS, (memos,))}
    accounts = {str(a): str(t) for a, t in conn.execute(ACCOUNTS)}
    return PaymentFacts(rows, invoices, accounts)


def judge_credited(facts: PaymentFacts, seeded: list[SeededPayment],
                   accepted: dict[str, tuple[str, str]]) -> Invariant:
    """Every credited row: the invoice its memo names, of the tenant that owns the
    receiving account, in the asset (code and issuer) accepted for the invoice's
    currency. Every payment seeded to be credited was, and every invoice seeded
    to be paid is."""
    bad = []
    credited = [r for r in facts.rows.values() if r["outcome"] != "unmatched"]
    for row in credited:
        invoice = facts.invoices.get(row["invoice_id"])
        asset = (row["asset_code"], row["asset_issuer"])
        if invoice is None or not names(row["memo"], row["invoice_id"]):
            bad.append(f"{row['payment_id']} credited to {row['invoice_id']}, memo {row['memo']}")
        elif not invoice["tenant_id"] == row["tenant_id"] == facts.accounts.get(row["to_account"]):
            owner = facts.accounts.get(row["to_account"], "nobody: not ours")
            bad.append(f"{row['payment_id']} to an account of {owner}, recorded for {row['tenant_id']}, credited "
                       f"{invoice['tenant_id']}'s invoice {invoice['id']}")
        elif accepted.get(invoice["currency"]) != asset:
            bad.append(f"{row['payment_id']} in {asset[0]}:{asset[1]} credited a {invoice['currency']} invoice")
    for payment in seeded:
        found = facts.rows.get(payment.payment_id)
        if payment.reason is None and (found is None or found["outcome"] == "unmatched"
                                       or not names(payment.memo, found["invoice_id"])):
            bad.append(f"{payment.payment_id} for {payment.memo} not credited to it")
        if payment.pays and facts.invoices.get(payment.pays, {}).get("status") != "paid":
            bad.append(f"{payment.pays} not paid")
    paid = sum(1 for p in seeded if p.pays)
    return Invariant("payments credited to the right invoice and asset", not bad, "; ".join(bad[:5]) or
                     f"{len(credited)} credited operations, each to its memo's invoice of the receiving account's "
                     f"tenant, in its currency's asset; {paid} invoices paid", cases=bad)


def judge_unmatched(facts: PaymentFacts, seeded: list[SeededPayment], baits: dict[str, str]) -> Invariant:
    """Every payment seeded not to be credited is recorded `unmatched` with the
    expected reason (under the tenant whose account got it), or not recorded
    at all when the account is not ours; every invoice one of them named is
    unpaid and has no credited payment."""
    bad = []
    reasons: Counter[str] = Counter()
    for payment in (p for p in seeded if p.reason is not None):
        row = facts.rows.get(payment.payment_id)
        reasons[payment.reason or ""] += 1
        if payment.reason == "skipped":
            if row is not None:
                bad.append(f"{payment.payment_id} to an account not ours was recorded ({row['outcome']})")
        elif row is None or (row["outcome"], row["reason"], row["tenant_id"]) != \
                ("unmatched", payment.reason, payment.tenant):
            got = "no row" if row is None else f"{row['outcome']}/{row['reason']} for {row['tenant_id']}"
            bad.append(f"{payment.payment_id} ({payment.reason}): {got}")
    for invoice_id, why in baits.items():
        credited = [r["payment_id"] for r in facts.rows.values()
                    if r["invoice_id"] == invoice_id and r["outcome"] != "unmatched"]
        if credited or facts.invoices.get(invoice_id, {}).get("status") == "paid":
            bad.append(f"{invoice_id} credited by {credited or 'something'} despite only a {why} payment")
    summary = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items()))
    return Invariant("unmatched payments recorded, never credited", not bad, "; ".join(bad[:5]) or
                     f"{summary}; {len(baits)} invoices they named stayed unpaid", cases=bad)


def judge_multi_operation(facts: PaymentFacts, seeded: list[SeededPayment]) -> Invariant:
    """A transaction with several payment operations: one row per operation
    (keyed by operation id), none missing, none extra, and the invoice it
    completes moved to `paid` once."""
    by_tx: dict[str, set[str]] = defaultdict(set)
    for payment in seeded:
        if payment.operations > 1 and payment.tenant is not None:
            by_tx[payment.transaction_hash].add(payment.payment_id)
    bad = []
    for tx, ids in sorted(by_tx.items()):
        recorded = {pid for pid, row in facts.rows.items() if row["transaction_hash"] == tx}
        if recorded != ids:
            bad.append(f"transaction {tx[:12]}: {len(ids)} operations, rows for {len(recorded & ids)} of them"
                       + (f" and {len(recorded - ids)} others" if recorded - ids else ""))
    for payment in seeded:
        if payment.operations > 1 and payment.pays:
            rows = facts.invoices.get(payment.pays, {}).get("paid_rows", 0)
            if rows != 1:
                bad.append(f"{payment.pays} moved to paid {rows} times")
    operations = sum(len(ids) for ids in by_tx.values())
    return Invariant("multi-operation payments: each operation once", bool(by_tx) and not bad,
                     "; ".join(bad[:5]) or (f"{len(by_tx)} transactions of {operations} operations: one row each, "
                                            "each invoice paid once" if by_tx else "no multi-operation payment seeded"),
                     cases=bad)


MERCHANT_EVENTS = """
SELECT o.event_id, o.webhook_id, o.event_type, o.payload FROM webhook_outbox o
 WHERE o.event_type IN ('payment.unmatched', 'payment.overpaid', 'invoice.paid')"""
SUBSCRIPTIONS = "SELECT id, tenant_id, event_types FROM webhook_subscriptions WHERE deleted_at IS NULL"


def judge_merchant_events(events: list[dict[str, Any]], subscriptions: list[dict[str, Any]],
                          facts: PaymentFacts, overpaid: list[str]) -> Invariant:
    """Every unmatched payment (recorded) and every overpayment is told to each
    subscription of its tenant whose filter takes the event, exactly once, and
    to no other; an overpaid invoice's invoice.paid says so, with nothing remaining."""
    from onceonly_app.events.types import payment_event_id

    count = Counter((e["event_id"], e["webhook_id"]) for e in events)
    bad, told = [], 0
    judged = [(r, "payment.unmatched") for r in facts.rows.values() if r["outcome"] == "unmatched"] + \
        [(r, "payment.overpaid") for r in facts.rows.values() if r["outcome"] == "overpaid"]
    for row, event_type in judged:
        for sub in subscriptions:
            takes = sub["tenant_id"] == row["tenant_id"] and (sub["event_types"] is None
                                                             or event_type in sub["event_types"])
            got = count[(payment_event_id(event_type, row["payment_id"]), sub["id"])]
            told += got
            if got != int(takes):
                bad.append(f"{event_type} of {row['payment_id']} to {sub['id']}: {got} times, expected {int(takes)}")
    for event in (e for e in events if e["event_type"] == "invoice.paid" and e["payload"].get("invoice_id") in
                  overpaid):
        if event["payload"].get("overpaid") is not True or event["payload"].get("amount_remaining") != 0:
            bad.append(f"invoice.paid of {event['payload']['invoice_id']} says overpaid="
                       f"{event['payload'].get('overpaid')}, remaining {event['payload'].get('amount_remaining')}")
    return Invariant("merchants told of unmatched and overpaid payments", bool(judged) and not bad,
                     "; ".join(bad[:5]) or f"{len(judged)} unmatched or overpaid payments, {told} events to the "
                                           "subscriptions whose filters take them, none to others", cases=bad)


def payment_invariants(conn: psycopg.Connection[Any], seeded: list[SeededPayment], baits: dict[str, str],
                       accepted: dict[str, tuple[str, str]], overpaid: list[str] | None = None) -> list[Invariant]:
    facts = read_facts(conn, seeded)
    with conn.cursor(row_factory=dict_row) as cur:
        events = cur.execute(MERCHANT_EVENTS).fetchall()
        subscriptions = cur.execute(SUBSCRIPTIONS).fetchall()
    return [judge_credited(facts, seeded, accepted), judge_unmatched(facts, seeded, baits),
            judge_multi_operation(facts, seeded), judge_merchant_events(events, subscriptions, facts, overpaid or [])]
