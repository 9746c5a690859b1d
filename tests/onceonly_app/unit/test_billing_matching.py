"""The verdict on one payment: credited only in an accepted asset of the
invoice's currency, to a payable invoice; everything else unmatched, with why."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from onceonly_app.billing.matching import judge

DUE_DAY_END = datetime(2026, 11, 16, tzinfo=UTC)
ON_TIME, LATE = DUE_DAY_END - timedelta(microseconds=1), DUE_DAY_END


def invoice(status: str = "open", currency: str = "USD", amount_cents: int = 10_00,
            credited_cents: int | str = 0) -> dict[str, Any]:
    return {"id": "inv_1", "status": status, "currency": currency, "amount_cents": amount_cents,
            "credited_cents": Decimal(credited_cents), "due_day_ends_at": DUE_DAY_END}


@pytest.mark.parametrize(("amount", "currency", "memo", "target", "expected"), [
    ("10", "USD", "inv_1", invoice(), ("settled", None, 10_00, False, None)),
    ("49.995", "USD", "inv_1", invoice(amount_cents=100_00, credited_cents="5000.5"),
     ("settled", None, Decimal("4999.5"), False, None)),
    ("0.0000001", "USD", "inv_1", invoice(credited_cents=10_00 - 1), ("partial", None, Decimal("0.00001"), False,
                                                                        "payment.partial")),
    ("0.0000001", "USD", "inv_1", invoice(credited_cents=10_00), ("overpaid", None, Decimal("0.00001"), False,
                                                                    "payment.overpaid")),
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
    verdict = judge(Decimal(amount), currency, memo, target, ON_TIME)
    assert (verdict.outcome, verdict.reason, verdict.amount_cents, verdict.late, verdict.event_kind) == expected
    assert verdict.credited == (verdict.outcome != "unmatched")


@pytest.mark.parametrize(("status", "paid_at", "late"), [
    ("open", ON_TIME, False), ("open", LATE, True),
    ("overdue", ON_TIME, False),  # marked overdue, but paid on its due day: not late
    ("overdue", LATE, True),
])
def test_lateness_is_judged_by_ledger_time_not_status(status: str, paid_at: datetime, late: bool) -> None:
    verdict = judge(Decimal("10"), "USD", "inv_1", invoice(status), paid_at)
    assert verdict.outcome == "settled" and verdict.late is late
    assert verdict.event_kind == ("payment.late" if late else None)
