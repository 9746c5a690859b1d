"""An HTTP proxy in front of dynalite that answers chosen DynamoDB requests
itself, with an error DynamoDB sends (a throttle, a 500), and forwards every
other request unchanged: botocore's own retry of the refused request then
reaches dynalite. Listens on 127.0.0.1 only.

    with DynamoDBAnswers(dynalite_endpoint) as proxy:
        proxy.refuse_next("UpdateItem", THROTTLED)   # the next UpdateItem gets a 400 throttle
        store = onceonly.connect(f"dynamodb://T?region=us-east-1&endpoint_url={proxy.endpoint}")
"""

from __future__ import annotations

import http.client
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import urlsplit

HOST = "127.0.0.1"


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str
    message: str


# What DynamoDB answers a request it did not apply because of the request rate.
THROTTLED = Refusal(400, "com.amazonaws.dynamodb.v20120810#ThrottlingException", "Rate of requests exceeds the"
                    " allowed throughput.")
# A server error: the request may or may not have been applied.
SERVER_ERROR = Refusal(500, "com.amazonaws.dynamodb.v20120810#InternalServerError", "Internal server error")


class DynamoDBAnswers:
    def __init__(self, target_endpoint: str) -> None:
        target = urlsplit(target_endpoint)
        if target.hostname != HOST or target.port is None:
            raise ValueError(f"the target must be on {HOST}, got {target_endpoint!r}")
        self._target_port = target.port
        self._lock = threading.Lock()
        self._pending: dict[str, list[Refusal]] = {}
        self._applied_then_failed: dict[str, int] = {}  # operation -> requests to forward, then answer a 500
        self.refused: list[str] = []  # operations answered here, in order
        self.forwarded: list[str] = []  # operations sent on to dynalite, in order
        self._server = ThreadingHTTPServer((HOST, 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="dynamodb-answers", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self._server.server_address[1]}"

    def refuse_next(self, operation: str, refusal: Refusal) -> None:
        """Answer the next request of ``operation`` (e.g. "UpdateItem") with ``refusal``."""
        with self._lock:
            self._pending.setdefault(operation, []).append(refusal)

    def apply_then_fail_next(self, operation: str) -> None:
        """Forward the next request of ``operation`` to dynalite (it is applied)
        and answer it with SERVER_ERROR: a reply lost after the write."""
        with self._lock:
            self._applied_then_failed[operation] = self._applied_then_failed.get(operation, 0) + 1

    def _lose_reply(self, operation: str) -> bool:
        with self._lock:
            if self._applied_then_failed.get(operation, 0) > 0:
                self._applied_then_failed[operation] -= 1
                return True
            return False

    def _take(self, operation: str) -> Refusal | None:
        with self._lock:
            queued = self._pending.get(operation)
            if queued:
                self.refused.append(operation)
                return queued.pop(0)
            self.forwarded.append(operation)
            return None

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                operation = str(self.headers.get("X-Amz-Target", "")).rpartition(".")[2]
                refusal = proxy._take(operation)
                if refusal is not None:
                    self._answer(refusal.status, json.dumps({"__type": refusal.code,
                                                             "message": refusal.message}).encode(), {})
                    return
                upstream = http.client.HTTPConnection(HOST, proxy._target_port, timeout=30)
                try:
                    upstream.request("POST", self.path, body=body, headers=dict(self.headers.items()))
                    response = upstream.getresponse()
                    data = response.read()
                    if proxy._lose_reply(operation):
                        self._answer(SERVER_ERROR.status, json.dumps({"__type": SERVER_ERROR.code,
                                                                      "message": SERVER_ERROR.message}).encode(), {})
                        return
                    headers = {k: v for k, v in response.getheaders()
                               if k.lower() in ("x-amz-crc32", "x-amzn-requestid", "content-type")}
                    self._answer(response.status, data, headers)
                finally:
                    upstream.close()

            def _answer(self, status: int, data: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                headers.setdefault("Content-Type", "application/x-amz-json-1.0")
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def __enter__(self) -> DynamoDBAnswers:
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
