"""A client for a Horizon-style payments API: ``GET {base}/accounts/{account}/
payments?cursor=…&order=asc&limit=N`` (``{base}/payments`` without an account)
returns ``{"_embedded": {"records": [...]}, "_links": …}``, one record per
operation of the account's payment history, oldest first.

How far the source has ingested the ledger is what IT says, never a clock:
before each page the client reads the root resource (``GET {base}/``:
``history_latest_ledger``, ``history_latest_ledger_closed_at``). A page that
reached the end of the history has read the ledger up to that close time, and
only if the page's own server had ingested as far (its ``Latest-Ledger``
header, where it sends one, is not below the root's ledger: servers behind a
load balancer may lag apart). A source whose ingestion has stalled keeps
answering "nothing new" with a current ``Date``; the position it gives stays
where it stalled, and the page says how far behind it is (``lag``).

- Payment records (``payment``, ``path_payment_strict_receive``,
  ``path_payment_strict_send``) carry ``id`` (the operation id: unique even
  when one transaction holds several payments), ``paging_token``,
  ``transaction_hash``, ``from``, ``to``, ``asset_type``/``asset_code``/
  ``asset_issuer`` and ``amount``. For a path payment those describe what the
  recipient RECEIVED; ``source_amount``/``source_asset_*`` what the sender spent.
- Other records (``create_account``, ``account_merge``, …) and operations of
  failed transactions moved no payment: they are skipped, and the cursor moves
  past them.

Paging follows the last record's ``paging_token`` (what Horizon's ``next``
link carries), so the client never requests a URL the server chose. Whether
the page was full is decided on the records returned, before any is skipped.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from email.utils import parsedate_to_datetime
from typing import Any

import requests
import urllib3

from .assets import Asset

CONNECT_TIMEOUT = 3.05
READ_TIMEOUT = 10.0
MAX_BODY_BYTES = 16 * 1024 * 1024
PAYMENT_TYPES = frozenset({"payment", "path_payment_strict_receive", "path_payment_strict_send",
                           "path_payment"})  # path_payment: Horizon's name before protocol 12


class PaymentsApiError(Exception):
    """The payments API could not be reached, took too long, or answered something unusable."""


@dataclass(frozen=True)
class Payment:
    payment_id: str  # the operation id
    paging_token: str
    transaction_hash: str
    operation_type: str
    to_account: str
    asset: Asset
    amount: Decimal  # what the recipient received, in units of ``asset``
    memo: str | None
    created_at: datetime  # the ledger's close time


@dataclass(frozen=True)
class Page:
    payments: list[Payment]  # payment operations of successful transactions
    skipped: int  # records that moved no payment (other types, failed transactions)
    next_cursor: str  # the last record's paging_token, or the cursor asked for if empty
    full: bool  # as many records as asked for: there may be more
    read_to: datetime | None  # every payment with an earlier ledger time is in this page or before it
    ingested_to: datetime | None = None  # the source's latest ingested ledger's close time (None: not stated)
    lag: timedelta | None = None  # how far that is behind the time the page was served


@dataclass(frozen=True)
class Ingestion:
    """How far the source has ingested the ledger (Horizon's root resource)."""

    ledger: int | None
    closed_at: datetime | None


def _amount(text: Any) -> Decimal:
    try:
        amount = Decimal(str(text))
    except InvalidOperation as exc:
        raise PaymentsApiError(f"amount {text!r} is not a decimal number") from exc
    if not amount.is_finite() or amount < 0:
        raise PaymentsApiError(f"amount {text!r} is not a non-negative decimal number")
    return amount


def _asset(record: dict[str, Any]) -> Asset:
    if record.get("asset_type") == "native":
        return Asset.native()
    return Asset(str(record["asset_code"]), str(record["asset_issuer"]))


def _payment(record: dict[str, Any]) -> Payment:
    try:
        return Payment(
            payment_id=str(record["id"]),
            paging_token=str(record["paging_token"]),
            transaction_hash=str(record["transaction_hash"]),
            operation_type=str(record["type"]),
            to_account=str(record["to"]),
            asset=_asset(record),
            amount=_amount(record["amount"]),
            memo=str(record["memo"]) if record.get("memo") else None,
            created_at=datetime.fromisoformat(str(record["created_at"])),
        )
    except (KeyError, ValueError) as exc:
        raise PaymentsApiError(f"malformed payment record (id {record.get('id')!r}): {exc!r}") from exc


def _server_date(response: requests.Response) -> datetime | None:
    try:
        return parsedate_to_datetime(response.headers["Date"]).astimezone(UTC)
    except (KeyError, TypeError, ValueError):
        return None  # no usable Date header: our own clock decides


def _read_to(records: list[dict[str, Any]], full: bool, ingested_to: datetime | None,
             served_at: datetime) -> datetime | None:
    """The ledger time a page has read up to. Records come in ledger order, so
    everything before the last record's time is read; a page that is not full
    reached the end of what the source has INGESTED, so the ledger is read up
    to the source's ingestion point (never past the time it was served), or
    the last record's time if that is later. A source that does not state its
    ingestion point gives no more than its last record."""
    last: datetime | None = None
    if records and records[-1].get("created_at"):
        try:
            last = datetime.fromisoformat(str(records[-1]["created_at"]))
        except ValueError as exc:
            raise PaymentsApiError(f"the last record's created_at {records[-1]['created_at']!r} is not a time") \
                from exc
    if full or ingested_to is None:
        return last
    end = min(ingested_to, served_at)
    return end if last is None else max(end, last)


def _ingestion(root: Any, page_ledger: int | None) -> Ingestion:
    """The root resource's ingestion point, unless the page's own server says
    (``Latest-Ledger``) it had ingested less: then nothing beyond the page is known."""
    if not isinstance(root, dict):
        return Ingestion(None, None)
    try:
        ledger = int(root["history_latest_ledger"]) if root.get("history_latest_ledger") is not None else None
        closed_text = root.get("history_latest_ledger_closed_at")
        closed_at = datetime.fromisoformat(str(closed_text)) if closed_text else None
    except (TypeError, ValueError) as exc:
        raise PaymentsApiError(f"the root resource's ingestion point is malformed: {exc}") from exc
    if closed_at is not None and closed_at.tzinfo is None:
        raise PaymentsApiError(f"history_latest_ledger_closed_at {closed_text!r} has no time zone")
    if page_ledger is not None and (ledger is None or page_ledger < ledger):
        return Ingestion(page_ledger, None)
    return Ingestion(ledger, closed_at)


def is_payment(record: dict[str, Any]) -> bool:
    """A payment operation of a successful transaction (Horizon lists failed
    transactions' operations too; they moved no money)."""
    return record.get("type") in PAYMENT_TYPES and record.get("transaction_successful", True) is not False


class PaymentsClient:
    def __init__(self, base_url: str, session: requests.Session | None = None,
                 timeout: tuple[float, float] = (CONNECT_TIMEOUT, READ_TIMEOUT)) -> None:
        self._base = base_url.rstrip("/")
        self._url = self._base + "/payments"
        self._session = session or requests.Session()
        self._timeout = timeout

    def page(self, cursor: str, limit: int = 200, *, timeout: float | None = None,
             account: str | None = None) -> Page:
        """The records after ``cursor`` of ``account``'s payments (None: the
        source's whole feed), oldest first, read after the source's ingestion
        point. Both requests together end within about ``timeout`` seconds
        (None: the client's connect + read timeouts). Raises PaymentsApiError."""
        connect, read = self._timeout
        deadline = time.monotonic() + (connect + read if timeout is None else timeout)
        root, _, _ = self._get(self._base + "/", {}, deadline)
        url = self._url if account is None else f"{self._base}/accounts/{account}/payments"
        parsed, served_at, page_ledger = self._get(url, {"cursor": cursor, "order": "asc", "limit": str(limit)},
                                                   deadline)
        records = (parsed.get("_embedded") or {}).get("records") if isinstance(parsed, dict) else None
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise PaymentsApiError(f"GET {url}: no _embedded.records list in the answer")
        payments = [_payment(r) for r in records if is_payment(r)]
        try:
            next_cursor = str(records[-1]["paging_token"]) if records else cursor
        except (KeyError, TypeError) as exc:
            raise PaymentsApiError(f"GET {url}: the last record has no paging_token") from exc
        full = len(records) >= limit
        ingested = _ingestion(root, page_ledger)
        lag = None if ingested.closed_at is None else max(served_at - ingested.closed_at, timedelta(0))
        return Page(payments=payments, skipped=len(records) - len(payments), next_cursor=next_cursor,
                    full=full, read_to=_read_to(records, full, ingested.closed_at, served_at),
                    ingested_to=ingested.closed_at, lag=lag)

    def _get(self, url: str, params: dict[str, str], deadline: float) -> tuple[Any, datetime, int | None]:
        """The parsed answer; when it was served (the earlier of the server's
        ``Date`` and our clock as the answer began: neither clock is trusted to
        be ahead); and its ``Latest-Ledger`` header, if any."""
        connect, read = self._timeout
        asked_at = datetime.now(UTC)
        total = max(deadline - time.monotonic(), 0.001)
        try:
            with self._session.get(url, params=params, stream=True, allow_redirects=False,
                                   timeout=(min(connect, total), min(read, total))) as response:
                response.raise_for_status()
                served_at = min(_server_date(response) or asked_at, asked_at)
                latest = response.headers.get("Latest-Ledger")
                body = _read_until(response, deadline)
        except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
            raise PaymentsApiError(f"GET {url} failed: {exc}") from exc
        try:
            parsed = json.loads(body)
        except ValueError as exc:
            raise PaymentsApiError(f"GET {url}: the answer is not JSON") from exc
        try:
            page_ledger = int(latest) if latest else None
        except ValueError as exc:
            raise PaymentsApiError(f"GET {url}: Latest-Ledger {latest!r} is not a ledger number") from exc
        return parsed, served_at, page_ledger

    def close(self) -> None:
        self._session.close()


def _read_until(response: requests.Response, deadline: float) -> bytes:
    """The body, read as it arrives; each read waits at most the read timeout,
    and a body still arriving at ``deadline`` is abandoned (a server trickling
    bytes cannot hold the run)."""
    body = bytearray()
    while chunk := response.raw.read1(65536, decode_content=True):
        body += chunk
        if time.monotonic() > deadline:
            raise PaymentsApiError(f"GET {response.url}: the answer took longer than its deadline")
        if len(body) > MAX_BODY_BYTES:
            raise PaymentsApiError(f"GET {response.url}: the answer is larger than {MAX_BODY_BYTES} bytes")
    return bytes(body)
