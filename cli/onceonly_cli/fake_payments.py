"""A fake Horizon-style payments API on 127.0.0.1, for tests and `onceonly simulate`.

``GET /payments?cursor=C&order=asc&limit=N`` answers the records whose paging
token is above ``C``, oldest first, in Horizon's shape::

    {"_links": {"self": {"href": …}, "next": {"href": …}},
     "_embedded": {"records": [{"id", "paging_token", "transaction_hash", "type",
                                 "transaction_successful", "amount", "asset_code",
                                 "memo", "created_at", …}]}}

Payments are added with :meth:`FakePayments.add`. Every request is recorded
(:attr:`FakePayments.requests`) so tests can see how a poller paged.
"""

from __future__ import annotations

import json
import secrets
import threading
from datetime import UTC, datetime
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

MAX_LIMIT = 200
PAGING_STEP = 4096  # Horizon's paging tokens are sparse; so are ours


class FakePayments:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[dict[str, Any]] = []
        self._base = 0  # paging tokens start above this
        self.requests: list[dict[str, str]] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- data ------------------------------------------------------------------
    def continue_after(self, paging_token: str) -> None:
        """Number the records after ``paging_token``, as a real API's history goes
        on: a poller whose cursor an earlier run left there sees every new record."""
        with self._lock:
            if self._records:
                raise RuntimeError("continue_after must come before the first add")
            self._base = int(paging_token) if paging_token.isdigit() else 0

    def add(self, *, memo: str | None, amount: str | Decimal, asset_code: str = "USD",
            transaction_hash: str | None = None, successful: bool = True) -> dict[str, Any]:
        """Append one payment; returns its record."""
        with self._lock:
            token = str(self._base + (len(self._records) + 1) * PAGING_STEP)
            record = {
                "id": token,
                "paging_token": token,
                "transaction_hash": transaction_hash or secrets.token_hex(32),
                "type": "payment",
                "transaction_successful": successful,
                "asset_type": "credit_alphanum4",
                "asset_code": asset_code,
                "amount": f"{Decimal(amount):.7f}",
                "from": "GFAKESENDER",
                "to": "GFAKERECEIVER",
                "memo": memo,
                "created_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
            self._records.append(record)
            return dict(record)

    def page(self, cursor: str, limit: int) -> list[dict[str, Any]]:
        after = int(cursor) if cursor else 0
        with self._lock:
            return [dict(r) for r in self._records if int(r["paging_token"]) > after][:limit]

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
        if parts.path != "/payments":
            return self._send(request, 404, {"title": "Resource Missing", "status": 404})
        order, cursor, limit_text = query.get("order", "asc"), query.get("cursor", ""), query.get("limit", "10")
        if order != "asc" or not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_LIMIT \
                or not (cursor == "" or cursor.isdigit()):
            return self._send(request, 400, {"title": "Bad Request", "status": 400,
                                             "detail": "order=asc, limit 1-200 and a numeric cursor only"})
        records = self.page(cursor, int(limit_text))
        next_cursor = records[-1]["paging_token"] if records else cursor
        base = f"{self.url}/payments?"
        body = {
            "_links": {
                "self": {"href": base + urlencode({"cursor": cursor, "limit": limit_text, "order": "asc"})},
                "next": {"href": base + urlencode({"cursor": next_cursor, "limit": limit_text, "order": "asc"})},
            },
            "_embedded": {"records": records},
        }
        return self._send(request, 200, body)

    @staticmethod
    def _send(request: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/hal+json")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)
