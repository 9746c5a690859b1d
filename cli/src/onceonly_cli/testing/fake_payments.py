"""A fake Horizon-style payments API on 127.0.0.1, for tests and `onceonly simulate`.

``GET /payments?cursor=C&order=asc&limit=N`` answers the operations whose paging
token is above ``C``, oldest first, in Horizon's shape::

    {"_links": {"self": {"href": …}, "next": {"href": …}},
     "_embedded": {"records": [{"id", "paging_token", "transaction_hash", "type",
                                 "transaction_successful", "created_at", "memo", …}]}}

Like Horizon, a transaction can hold several operations; each has its own id
(= paging token: the transaction's token plus the operation's 1-based index).
The history of an account lists more than payments: ``create_account`` and
``account_merge`` records, path payments (``amount`` is what the recipient got,
``source_amount`` what the sender spent), and payments sent FROM the account.

- :meth:`FakePayments.add`: one payment in a transaction of its own;
- :meth:`FakePayments.add_transaction`: several operations, built with
  :meth:`payment`, :meth:`path_payment`, :meth:`create_account`, :meth:`account_merge`;
- :attr:`FakePayments.receiver` is the account payments go to by default, and
  :attr:`FakePayments.issuer` the issuer of its assets (both random per fake);
- :meth:`FakePayments.trickle` makes the server send its answers slowly;
- :attr:`FakePayments.clock` is the ledger's time (None: the real time): a
  record whose ``created_at`` is later is not listed yet (its ledger has not
  closed), nor is any record after it (the history is in ledger order); new
  records get it as their time, and answers carry it as ``Date``;
- :attr:`FakePayments.down` makes every request fail with 503, as in an outage;
- every request is recorded (:attr:`FakePayments.requests`);
- ``GET /`` is Horizon's root resource: how far the server has ingested the
  ledger (``history_latest_ledger``, ``history_latest_ledger_closed_at``; one
  ledger a second here), and every answer carries it as ``Latest-Ledger``;
  :attr:`FakePayments.ingestion_lag` (a timedelta) or
  :attr:`FakePayments.stalled_at` (a time) keep ingestion behind the ledger's
  time: records after the ingestion point are not listed, while the ``Date``
  stays current, as a lagging Horizon answers;
- ``GET /accounts/{id}/payments`` lists the records that involve that account
  (sent to or from it, creating or merging it), ``GET /payments`` all of them.
"""

from __future__ import annotations

import base64
import itertools
import json
import secrets
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

MAX_LIMIT = 200
PAGING_STEP = 4096  # one transaction's share of paging tokens (Horizon: 12 bits of operation index)


def random_account() -> str:
    """A random account id in Stellar's public-key shape (G + 55 base32 characters)."""
    return "G" + base64.b32encode(secrets.token_bytes(35)).decode()[1:56]


def _amount(value: str | Decimal) -> str:
    return f"{Decimal(value):.7f}"


def _ledger(closed_at: datetime) -> int:
    """The sequence number of the ledger closed at ``closed_at`` (one a second)."""
    return int(closed_at.timestamp())


def _account_of(path: str) -> str | None:
    """``G…`` of ``/accounts/G…/payments``, else None."""
    parts = path.split("/")
    if len(parts) == 4 and parts[1] == "accounts" and parts[3] == "payments" and parts[2]:
        return parts[2]
    return None


def _involved(record: dict[str, Any]) -> set[str]:
    """The accounts a record involves (Horizon lists it in each one's history)."""
    return {record[k] for k in ("from", "to", "account", "into", "funder") if record.get(k)}


class FakePayments:
    def __init__(self, receiver: str | None = None, issuer: str | None = None) -> None:
        self.receiver = receiver or random_account()
        self.issuer = issuer or random_account()
        self._lock = threading.Lock()
        self._records: list[dict[str, Any]] = []
        self._transactions = 0
        # Paging tokens (= operation ids) start above this: a random ledger, as
        # operation ids are unique across the whole ledger, not per fake.
        self._base = secrets.randbelow(1 << 24) << 32
        self._trickle: tuple[int, float] | None = None
        self.clock: datetime | None = None
        self.ingestion_lag: timedelta | None = None
        self.stalled_at: datetime | None = None
        self.down = False
        self.requests: list[dict[str, str]] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- data ------------------------------------------------------------------
    def _asset(self, code: str | None, issuer: str | None) -> dict[str, Any]:
        if code is None:
            return {"asset_type": "native"}
        return {"asset_type": "credit_alphanum4" if len(code) <= 4 else "credit_alphanum12",
                "asset_code": code, "asset_issuer": issuer or self.issuer}

    def payment(self, amount: str | Decimal, *, asset_code: str | None = "USD", asset_issuer: str | None = None,
                to: str | None = None, sender: str | None = None) -> dict[str, Any]:
        """A ``payment`` operation (``asset_code=None``: the native asset)."""
        return {"type": "payment", "from": sender or random_account(), "to": to or self.receiver,
                **self._asset(asset_code, asset_issuer), "amount": _amount(amount)}

    def path_payment(self, amount: str | Decimal, *, source_amount: str | Decimal, strict: str = "send",
                     asset_code: str | None = "USD", asset_issuer: str | None = None,
                     to: str | None = None) -> dict[str, Any]:
        """A path payment: the recipient gets ``amount`` of the asset; the sender
        spent ``source_amount`` of the native asset."""
        bound = ({"destination_min": _amount(Decimal(amount) * Decimal("0.9"))} if strict == "send"
                 else {"source_max": _amount(Decimal(source_amount) * Decimal("1.1"))})
        return {"type": f"path_payment_strict_{strict}", "from": random_account(), "to": to or self.receiver,
                **self._asset(asset_code, asset_issuer), "amount": _amount(amount),
                "source_asset_type": "native", "source_amount": _amount(source_amount), "path": [], **bound}

    def create_account(self, starting_balance: str | Decimal, *, account: str | None = None) -> dict[str, Any]:
        return {"type": "create_account", "funder": random_account(), "account": account or self.receiver,
                "starting_balance": _amount(starting_balance)}

    def account_merge(self, *, into: str | None = None) -> dict[str, Any]:
        return {"type": "account_merge", "account": random_account(), "into": into or self.receiver}

    def add(self, *, memo: str | None, amount: str | Decimal, asset_code: str | None = "USD",
            asset_issuer: str | None = None, to: str | None = None, transaction_hash: str | None = None,
            successful: bool = True, created_at: datetime | None = None) -> dict[str, Any]:
        """Append one payment in a transaction of its own; returns its record."""
        operation = self.payment(amount, asset_code=asset_code, asset_issuer=asset_issuer, to=to)
        (record,) = self.add_transaction([operation], memo=memo, transaction_hash=transaction_hash,
                                         successful=successful, created_at=created_at)
        return record

    def add_transaction(self, operations: Sequence[dict[str, Any]], *, memo: str | None = None,
                        transaction_hash: str | None = None, successful: bool = True,
                        created_at: datetime | None = None) -> list[dict[str, Any]]:
        """Append one transaction holding ``operations``; returns their records."""
        when = (created_at or self.now()).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        tx_hash = transaction_hash or secrets.token_hex(32)
        with self._lock:
            self._transactions += 1
            first = self._base + self._transactions * PAGING_STEP
            added = []
            for index, operation in enumerate(operations, start=1):
                token = str(first + index)
                record = {"id": token, "paging_token": token, "transaction_hash": tx_hash,
                          "transaction_successful": successful, "created_at": when, "memo": memo, **operation}
                self._records.append(record)
                added.append(dict(record))
            return added

    def trickle(self, chunk_bytes: int, every_seconds: float) -> None:
        """Send every later answer ``chunk_bytes`` at a time, ``every_seconds`` apart."""
        self._trickle = (chunk_bytes, every_seconds)

    def now(self) -> datetime:
        """The ledger's time: :attr:`clock`, or the real time."""
        return self.clock or datetime.now(UTC)

    def ingested_to(self) -> datetime:
        """The close time of the latest ledger ingested: :meth:`now` (whole
        seconds), less :attr:`ingestion_lag`, or :attr:`stalled_at` if earlier."""
        point = self.now().replace(microsecond=0)
        if self.ingestion_lag is not None:
            point -= self.ingestion_lag
        if self.stalled_at is not None:
            point = min(point, self.stalled_at)
        return point

    def page(self, cursor: str, limit: int, account: str | None = None) -> list[dict[str, Any]]:
        """The records after ``cursor`` (of ``account``, if given), up to the
        first whose ledger has not been ingested by :meth:`ingested_to`."""
        after = int(cursor) if cursor else 0
        closed = self.ingested_to().strftime("%Y-%m-%dT%H:%M:%SZ")  # the records' own format: sorts as text
        with self._lock:
            later = (r for r in self._records if int(r["paging_token"]) > after)
            ingested = itertools.takewhile(lambda r: r["created_at"] <= closed, later)
            return [dict(r) for r in ingested if account is None or account in _involved(r)][:limit]

    # -- server ----------------------------------------------------------------
    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the fake payments server is not running: call start()")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self, port: int = 0) -> str:
        """Listen on 127.0.0.1 (a free port by default); returns the base URL."""
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                fake._answer(self)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet in tests
                return

            def date_time_string(self, timestamp: float | None = None) -> str:  # the Date header: ledger time
                return formatdate(fake.now().timestamp(), usegmt=True)

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-payments", daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakePayments:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _answer(self, request: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(request.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        with self._lock:
            self.requests.append(query)
        if self.down:
            return self._send(request, 503, {"title": "Service Unavailable", "status": 503})
        if parts.path == "/":
            ingested = self.ingested_to()
            return self._send(request, 200, {"history_latest_ledger": _ledger(ingested),
                                             "history_latest_ledger_closed_at": ingested.strftime(
                                                 "%Y-%m-%dT%H:%M:%SZ")})
        account = _account_of(parts.path)
        if parts.path != "/payments" and account is None:
            return self._send(request, 404, {"title": "Resource Missing", "status": 404})
        order, cursor, limit_text = query.get("order", "asc"), query.get("cursor", ""), query.get("limit", "10")
        if order != "asc" or not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_LIMIT \
                or not (cursor == "" or cursor.isdigit()):
            return self._send(request, 400, {"title": "Bad Request", "status": 400,
                                             "detail": "order=asc, limit 1-200 and a numeric cursor only"})
        records = self.page(cursor, int(limit_text), account)
        next_cursor = records[-1]["paging_token"] if records else cursor
        base = f"{self.url}{parts.path}?"
        body = {
            "_links": {
                "self": {"href": base + urlencode({"cursor": cursor, "limit": limit_text, "order": "asc"})},
                "next": {"href": base + urlencode({"cursor": next_cursor, "limit": limit_text, "order": "asc"})},
            },
            "_embedded": {"records": records},
        }
        return self._send(request, 200, body)

    def _send(self, request: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        trickle = self._trickle
        request.send_response(status)
        request.send_header("Content-Type", "application/hal+json")
        request.send_header("Latest-Ledger", str(_ledger(self.ingested_to())))
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        if trickle is None:
            request.wfile.write(data)
            return
        size, pause = trickle
        try:
            for start in range(0, len(data), size):
                request.wfile.write(data[start:start + size])
                request.wfile.flush()
                time.sleep(pause)
        except OSError:
            return  # the client gave up: what a trickled answer is for
