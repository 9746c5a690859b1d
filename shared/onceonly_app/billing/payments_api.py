"""A client for a Horizon-style payments API: ``GET {base}/payments?cursor=…&
order=asc&limit=N`` returns ``{"_embedded": {"records": [...]}, "_links": …}``;
each record has ``id``, ``paging_token``, ``transaction_hash`` (unique),
``amount`` (decimal string), ``asset_code``, ``memo`` and ``created_at``.
Paging follows the last record's ``paging_token`` (what Horizon's ``next``
link carries), so the client never requests a URL the server chose."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_FLOOR, Decimal, InvalidOperation
from typing import Any

import requests

CONNECT_TIMEOUT = 3.05
READ_TIMEOUT = 10.0


class PaymentsApiError(Exception):
    """The payments API could not be reached or answered something unusable."""


@dataclass(frozen=True)
class Payment:
    payment_id: str
    paging_token: str
    transaction_hash: str
    amount_cents: int
    asset_code: str
    memo: str | None
    created_at: datetime | None


@dataclass(frozen=True)
class Page:
    payments: list[Payment]
    next_cursor: str  # the last record's paging_token, or the cursor asked for if empty


def _cents(amount: str) -> int:
    """Whole cents, rounded down: a sub-cent remainder never credits an invoice
    with more than was paid (and never blocks the poller on one odd record)."""
    try:
        return int((Decimal(amount) * 100).to_integral_value(rounding=ROUND_FLOOR))
    except (InvalidOperation, TypeError) as exc:
        raise PaymentsApiError(f"amount {amount!r} is not a decimal number") from exc


def _payment(record: dict[str, Any]) -> Payment:
    try:
        created = record.get("created_at")
        return Payment(
            payment_id=str(record["id"]),
            paging_token=str(record["paging_token"]),
            transaction_hash=str(record["transaction_hash"]),
            amount_cents=_cents(str(record["amount"])),
            asset_code=str(record.get("asset_code") or "XLM"),
            memo=str(record["memo"]) if record.get("memo") else None,
            created_at=datetime.fromisoformat(created) if created else None,
        )
    except (KeyError, ValueError) as exc:
        raise PaymentsApiError(f"malformed payment record (id {record.get('id')!r}): {exc}") from exc


class PaymentsClient:
    def __init__(self, base_url: str, session: requests.Session | None = None,
                 timeout: tuple[float, float] = (CONNECT_TIMEOUT, READ_TIMEOUT)) -> None:
        self._url = base_url.rstrip("/") + "/payments"
        self._session = session or requests.Session()
        self._timeout = timeout

    def page(self, cursor: str, limit: int = 200) -> Page:
        """The payments after ``cursor``, oldest first. Raises PaymentsApiError."""
        params = {"cursor": cursor, "order": "asc", "limit": str(limit)}
        try:
            response = self._session.get(self._url, params=params, timeout=self._timeout,
                                         allow_redirects=False)
            response.raise_for_status()
            body = response.json()
        except requests.RequestException as exc:
            raise PaymentsApiError(f"GET {self._url} failed: {exc}") from exc
        except ValueError as exc:
            raise PaymentsApiError(f"GET {self._url}: the answer is not JSON") from exc
        records = (body.get("_embedded") or {}).get("records") if isinstance(body, dict) else None
        if not isinstance(records, list):
            raise PaymentsApiError(f"GET {self._url}: no _embedded.records list in the answer")
        # Horizon lists failed transactions' operations too; they moved no money.
        payments = [_payment(r) for r in records if r.get("transaction_successful", True) is not False]
        next_cursor = str(records[-1]["paging_token"]) if records else cursor
        return Page(payments=payments, next_cursor=next_cursor)

    def close(self) -> None:
        self._session.close()
