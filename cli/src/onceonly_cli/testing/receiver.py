"""A local webhook receiver on 127.0.0.1 for tests and `onceonly simulate`.

It verifies every request with ``standardwebhooks.Webhook.verify`` (the check a
real merchant makes), counts requests per ``webhook-id`` and records each one
(webhook-id, arrival time, status returned). Endpoints can be slow, flaky or
scripted: fail the first N requests of an id, answer 429 with Retry-After, 410,
hold a request until the test releases it (to kill the sender mid-request), or
trickle the answer a byte at a time (a slow endpoint that never goes quiet).

A request whose sender hung up before its whole body arrived (a replica killed
mid-POST: fewer bytes than its Content-Length, or a reset) is a cut attempt,
kept in :attr:`WebhookReceiver.cut_attempts`: like a real web server, the
receiver never hands it to the endpoint, so it is not verified, not answered
and not counted as a request of its webhook-id."""

from __future__ import annotations

import argparse
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

HOLD_LIMIT = 120.0  # a held request is answered after this even if never released


@dataclass(frozen=True)
class Reply:
    """One scripted answer."""

    status: int = 200
    retry_after: str | None = None  # Retry-After header value
    delay: float = 0.0  # seconds before answering
    hold: threading.Event | None = None  # answer only once this is set
    trickle: float = 0.0  # > 0: send the response (status line included) one byte per this many seconds
    body: bytes | None = None  # the response body; default "ok" or "status N"
    headers: tuple[tuple[str, str], ...] = ()  # extra response headers, e.g. webhook-delivery: abort-message


@dataclass
class Behaviour:
    """How an endpoint answers requests that have no scripted reply."""

    latency: float = 0.0
    failure_rate: float = 0.0  # share of requests answered with failure_status
    failure_status: int = 500
    fail_first: int = 0  # the first N requests of every webhook-id fail
    retry_after: str | None = None  # sent with 429/503 failures
    seed: int = 0
    gone_until: threading.Event | None = None  # answer 410 Gone to every request until this is set
    fail_until: threading.Event | None = None  # answer failure_status to every request until this is set
    abort_until: threading.Event | None = None  # answer 422 with webhook-delivery: abort-message until set


@dataclass
class ReceivedRequest:
    webhook_id: str | None
    endpoint: str
    nth: int  # 1 for the first request with this webhook-id
    received_at: float
    host: str | None
    verified: bool
    error: str | None  # why verification failed
    status: int | None = None  # None while the answer is pending
    answered_at: float | None = None
    body: bytes = field(default=b"", repr=False)
    retry_after: str | None = None  # the Retry-After header sent with the answer
    trickled: bool = False  # the answer was sent a byte at a time
    cut: bool = False  # the sender hung up before the whole answer was written: it never read it
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # as received (Standard Webhooks' three)

    @property
    def accepted(self) -> bool:
        """Answered 2xx, and the sender read the whole answer."""
        return self.status is not None and 200 <= self.status < 300 and not self.cut


@dataclass(frozen=True)
class CutAttempt:
    """A request its sender cut mid-body: never seen by the endpoint."""

    webhook_id: str | None
    endpoint: str
    received_at: float
    declared: int  # the Content-Length it announced
    received: int  # the body bytes that arrived


@dataclass
class _Endpoint:
    webhook: Webhook
    behaviour: Behaviour
    rng: random.Random


class _Server(ThreadingHTTPServer):
    # A web server's listen backlog (nginx: 511), not socketserver's 5: with
    # more connects at once than the backlog holds, the kernel drops the
    # others' SYNs and each client waits a second to send it again.
    request_queue_size = 512


class _QuietServer(_Server):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A killed sender resets its connection; that is expected, not news."""


class WebhookReceiver:
    """``with WebhookReceiver() as rx: url = rx.endpoint("a", secret)``

    ``quiet=True`` stops http.server printing a traceback for each connection a
    client drops (a SIGKILLed replica does that to its keep-alive socket)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, quiet: bool = False) -> None:
        self._lock = threading.Condition()
        self._endpoints: dict[str, _Endpoint] = {}
        self._scripts: dict[str, list[Reply]] = {}
        self._counts: Counter[str] = Counter()
        self.requests: list[ReceivedRequest] = []
        self.cut_attempts: list[CutAttempt] = []
        server_class = _QuietServer if quiet else _Server
        self._server = server_class((host, port), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- set up ------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def endpoint(self, name: str, secret: str, behaviour: Behaviour | None = None) -> str:
        """Serve ``/name`` verifying with ``secret``; returns its URL."""
        behaviour = behaviour or Behaviour()
        with self._lock:
            self._endpoints[name] = _Endpoint(Webhook(secret), behaviour, random.Random(behaviour.seed))
        return f"{self.base_url}/{name}"

    def script(self, webhook_id: str, replies: list[Reply]) -> None:
        """Answer the next requests carrying ``webhook_id`` with ``replies``, in order."""
        with self._lock:
            self._scripts.setdefault(webhook_id, []).extend(replies)

    def start(self) -> WebhookReceiver:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="webhook-receiver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> WebhookReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- history -------------------------------------------------------------------
    def history(self, webhook_id: str | None = None) -> list[ReceivedRequest]:
        with self._lock:
            return [r for r in self.requests if webhook_id is None or r.webhook_id == webhook_id]

    def successes(self) -> Counter[str]:
        """Requests answered 2xx (and read whole), per webhook-id."""
        with self._lock:
            return Counter(r.webhook_id for r in self.requests if r.webhook_id and r.accepted)

    def counts(self) -> Counter[str]:
        """All requests, per webhook-id."""
        with self._lock:
            return Counter(self._counts)

    def wait_for(self, predicate: Callable[[list[ReceivedRequest]], bool], timeout: float = 30.0) -> bool:
        """Block until ``predicate(requests)`` holds (checked on every change)."""
        with self._lock:
            return self._lock.wait_for(lambda: predicate(self.requests), timeout=timeout)

    def wait_for_cut_attempts(self, count: int, timeout: float = 30.0) -> bool:
        """Block until at least ``count`` cut attempts were recorded."""
        with self._lock:
            return self._lock.wait_for(lambda: len(self.cut_attempts) >= count, timeout=timeout)

    # -- serving ---------------------------------------------------------------------
    def _decide(self, endpoint: _Endpoint, webhook_id: str | None, nth: int) -> Reply:
        scripted = self._scripts.get(webhook_id or "")
        if scripted:
            return scripted.pop(0)
        b = endpoint.behaviour
        if b.gone_until is not None and not b.gone_until.is_set():
            return Reply(410)
        if b.abort_until is not None and not b.abort_until.is_set():
            return Reply(422, headers=(("webhook-delivery", "abort-message"),))
        if b.fail_until is not None and not b.fail_until.is_set():
            return Reply(b.failure_status, delay=b.latency)
        failing = nth <= b.fail_first or (b.failure_rate > 0 and endpoint.rng.random() < b.failure_rate)
        if failing:
            retry_after = b.retry_after if b.failure_status in (429, 503) else None
            return Reply(b.failure_status, retry_after, b.latency)
        return Reply(200, None, b.latency)

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        name = request.path.lstrip("/").split("?", 1)[0]
        webhook_id = request.headers.get("webhook-id")
        body = _read_body(request, length)
        if len(body) < length:  # the sender hung up mid-body: there is nobody to answer
            request.close_connection = True
            with self._lock:
                self.cut_attempts.append(CutAttempt(webhook_id, name, time.time(), length, len(body)))
                self._lock.notify_all()
            return
        headers = {k: v for k, v in request.headers.items()}
        with self._lock:
            endpoint = self._endpoints.get(name)
            verified, error = False, "unknown endpoint"  # type: tuple[bool, str | None]
            if endpoint is not None:
                try:
                    endpoint.webhook.verify(body, headers)
                    verified, error = True, None
                except WebhookVerificationError as exc:
                    error = str(exc)
            nth = 0
            if webhook_id:
                self._counts[webhook_id] += 1
                nth = self._counts[webhook_id]
            record = ReceivedRequest(webhook_id, name, nth, time.time(), request.headers.get("Host"),
                                     verified, error, body=body, headers=headers)
            self.requests.append(record)
            if endpoint is None:
                reply = Reply(404)
            elif not verified:
                reply = Reply(401)
            else:
                reply = self._decide(endpoint, webhook_id, nth)
            self._lock.notify_all()
        if reply.hold is not None:
            reply.hold.wait(HOLD_LIMIT)
        if reply.delay:
            time.sleep(reply.delay)
        with self._lock:
            record.status, record.answered_at = reply.status, time.time()
            record.retry_after, record.trickled = reply.retry_after, reply.trickle > 0
            self._lock.notify_all()
        text = reply.body if reply.body is not None else \
            b"ok" if 200 <= reply.status < 300 else f"status {reply.status}".encode()
        stream = request.wfile
        if reply.trickle > 0:
            request.wfile = _Trickle(stream, reply.trickle)  # type: ignore[assignment]
        try:
            request.send_response(reply.status)
            if reply.retry_after is not None:
                request.send_header("Retry-After", reply.retry_after)
            for name, value in reply.headers:
                request.send_header(name, value)
            request.send_header("Content-Type", "text/plain")
            request.send_header("Content-Length", str(len(text)))
            request.end_headers()
            request.wfile.write(text)
        except (BrokenPipeError, ConnectionResetError):
            with self._lock:  # the sender died or gave up (a killed replica, a timeout)
                record.cut = True
                self._lock.notify_all()
        finally:
            request.wfile = stream

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                receiver._handle(self)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                return  # the history is the log

        return Handler


def _read_body(request: BaseHTTPRequestHandler, length: int) -> bytes:
    """Up to ``length`` body bytes: fewer when the sender closed or reset the
    connection before sending them all."""
    chunks, left = [], length
    try:
        while left > 0 and (chunk := request.rfile.read1(left)):  # type: ignore[attr-defined]
            chunks.append(chunk)
            left -= len(chunk)
    except (ConnectionResetError, TimeoutError):
        pass  # what arrived is all there will be
    return b"".join(chunks)


class _Trickle:
    """A response stream that sends one byte per ``gap`` seconds: each byte comes
    well within any per-read timeout, so only a bound on the whole request stops it."""

    def __init__(self, stream: Any, gap: float) -> None:
        self._stream, self._gap = stream, gap

    def write(self, data: bytes) -> int:
        for i in range(len(data)):
            self._stream.write(data[i:i + 1])
            self._stream.flush()
            time.sleep(self._gap)
        return len(data)

    def flush(self) -> None:
        self._stream.flush()


def main(argv: list[str] | None = None) -> None:
    """Run a receiver in the foreground: ``python -m onceonly_cli.testing.receiver --secret whsec_…``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--name", default="hooks")
    parser.add_argument("--failure-rate", type=float, default=0.0)
    parser.add_argument("--latency", type=float, default=0.0)
    args = parser.parse_args(argv)
    receiver = WebhookReceiver(port=args.port).start()
    behaviour = Behaviour(latency=args.latency, failure_rate=args.failure_rate)
    url = receiver.endpoint(args.name, args.secret, behaviour)
    print(f"receiving on {url} (Ctrl-C to stop)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        receiver.stop()


if __name__ == "__main__":
    main()
