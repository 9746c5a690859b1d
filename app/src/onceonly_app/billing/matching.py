"""What one received payment does to the invoice its memo names: the verdict
is decided here, from the payment's currency (its asset, per the accepted
assets) and the invoice as locked in the payment's transaction.

Nothing is credited unless the asset is accepted for the invoice's currency and
the invoice is still payable (open or overdue). Everything else is recorded as
`unmatched`, with a reason, for a person to refund or assign."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from .money import to_minor

PAYABLE = ("open", "overdue")


@dataclass(frozen=True)
class Verdict:
    outcome: str  # settled | partial | overpaid | unmatched
    reason: str | None  # why a payment is unmatched
    amount_cents: Decimal | None  # the exact amount in minor units of its currency (None: no currency)
    invoice_id: str | None  # the invoice the memo named, credited or not
    late: bool  # credited at or after the end of the invoice's due day, by ledger time

    @property
    def credited(self) -> bool:
        return self.outcome != "unmatched"

    @property
    def event_kind(self) -> str | None:
        """The activity event a person should see, if any: all but a settling,
        on-time payment."""
        if self.outcome == "settled":
            return "payment.late" if self.late else None
        return f"payment.{self.outcome}"


def judge(amount: Decimal, currency: str | None, memo: str | None,
          invoice: Mapping[str, Any] | None, paid_at: datetime) -> Verdict:
    """``currency``: what the payment's asset pays (None: not accepted).
    ``paid_at``: the payment's ledger time; it is late if that is at or after
    the invoice's ``due_day_ends_at``, whatever the invoice's status says (an
    invoice may be overdue because the watcher saw an on-time payment late).
    ``invoice``: the memo's invoice in the receiving account's tenant, with
    ``credited_cents`` (what earlier credited payments cover, exactly), or None.
    The sum is compared with the amount due exactly: no payment is rounded."""
    cents = to_minor(amount, currency) if currency is not None else None
    invoice_id = invoice["id"] if invoice is not None else None

    def unmatched(reason: str) -> Verdict:
        return Verdict("unmatched", reason, cents, invoice_id, late=False)

    if currency is None:
        return unmatched("asset_not_accepted")
    if invoice is None:
        return unmatched("unknown_invoice" if memo else "no_memo")
    if currency != invoice["currency"]:
        return unmatched("wrong_currency")
    if invoice["status"] not in PAYABLE:
        return unmatched(f"invoice_{invoice['status']}")
    assert cents is not None
    covered = invoice["credited_cents"] + cents
    outcome = "partial" if covered < invoice["amount_cents"] else \
        "settled" if covered == invoice["amount_cents"] else "overpaid"
    return Verdict(outcome, None, cents, invoice_id, late=paid_at >= invoice["due_day_ends_at"])
