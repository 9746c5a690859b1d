"""The webhook event types the app emits, and their ids.

An event id is stable per change (an invoice is paid once, goes overdue once; a
payment is judged once), so an event sent twice dedupes at the dispatcher."""

from __future__ import annotations

import hashlib

# Every webhook event type the app emits. fan_out refuses others, so a new type
# is added here, and the two-tenant isolation test then covers it too.
EVENT_TYPES = ("invoice.overdue", "invoice.paid", "payment.unmatched", "payment.overpaid")


def invoice_event_id(event_type: str, invoice_id: str) -> str:
    """Stable per invoice and type (an invoice is paid once, goes overdue once),
    so a re-sent event dedupes at the dispatcher, and two invoices changed by
    one transaction get two events."""
    return "evt_" + hashlib.sha256(f"{event_type}:{invoice_id}".encode()).hexdigest()[:32]


def invoice_paid_event_id(invoice_id: str) -> str:
    return invoice_event_id("invoice.paid", invoice_id)


def payment_event_id(event_type: str, payment_id: str) -> str:
    """Stable per received payment (its operation id) and type: a payment is
    judged once, and a re-sent event dedupes at the dispatcher."""
    return invoice_event_id(event_type, f"payment:{payment_id}")
