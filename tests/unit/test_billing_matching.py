"""The verdict on one payment: credited only in an accepted asset of the
invoice's currency, to a payable invoice; everything else unmatched, with why."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from onceonly_app.billing.matching import judge


def invoice(status: str = "open", currency: str = "USD", amount_cents: int = 10_00,
            credited_cents: int = 0) -> dict[str, Any]:
    return {"id": "inv_1", "status": status, "currency": currency, "amount_cents": amount_cents,
            "credited_cents": credited_cents}


@pytest.mark.parametrize(("amount", "currency", "memo", "target", "expected"), [
    ("10", "USD", "inv_1", invoice(), ("settled", None, 10_00, False, None)),
    ("10", "USD", "inv_1", invoice("overdue"), ("settled", None, 10_00, True, "payment.late")),
    ("4", "USD", "inv_1", invoice(), ("partial", None, 4_00, False, "payment.partial")),
    ("6", "USD", "inv_1", invoice(credited_cents=4_00), ("settled", None, 6_00, False, None)),
    ("15", "USD", "inv_1", invoice(), ("overpaid", None, 15_00, False, "payment.overpaid")),
    ("10", None, "inv_1", invoice(), ("unmatched", "asset_not_accepted", None, False, "payment.unmatched")),
    ("10", "EUR", "inv_1", invoice(), ("unmatched", "wrong_currency", 10_00, False, "payment.unmatched")),
    ("10", "USD", None, None, ("unmatched", "no_memo", 10_00, False, "payment.unmatched")),
    ("10", "USD", "inv_x", None, ("unmatched", "unknown_invoice", 10_00, False, "payment.unmatched")),
    ("10", "USD", "inv_1", invoice("paid"), ("unmatched", "invoice_paid", 10_00, False, "payment.unmatched")),
    ("10", "USD", "inv_1", invoice("void"), ("unmatched", "invoice_void", 10_00, False, "payment.unmatched")),
    ("1000", "JPY", "inv_1", invoice(currency="JPY", amount_cents=1000), ("settled", None, 1000, False, None)),
])
def test_verdicts(amount: str, currency: str | None, memo: str | None, target: dict[str, Any] | None,
                  expected: tuple[Any, ...]) -> None:
    verdict = judge(Decimal(amount), currency, memo, target)
    assert (verdict.outcome, verdict.reason, verdict.amount_cents, verdict.late, verdict.event_kind) == expected
    assert verdict.credited == (verdict.outcome != "unmatched")
