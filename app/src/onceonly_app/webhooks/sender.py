"""POST one signed webhook to the address the SSRF guard checked, within one
deadline.

- The socket dials the checked IP; the Host header, the TLS SNI and the
  certificate check keep the real host name, so a DNS answer that changes
  after the check is never used.
- One deadline bounds connect, TLS handshake, headers and body together
  (budget.py, watchdog.py): a watchdog shuts the socket down when it passes, so an endpoint
  that trickles bytes cannot hold the attempt open read by read.
- One connection per attempt, closed afterwards: nothing slow goes back to a
  pool. Redirects are never followed (http.client does not), no proxy is ever
  used (we dial the address ourselves), and at most MAX_RESPONSE_BYTES (512) of
  the response body are read, for the error text (limits.py)."""

from __future__ import annotations

import http.client
import socket
import ssl
import time
from dataclasses import dataclass

import certifi

from onceonly_app.events.limits import MAX_RESPONSE_BYTES
from onceonly_app.runtime.budget import Budget, DeadlineExceededError

from .backoff import RETRY_AFTER_STATUSES
from .ssrf import Target
from .watchdog import SocketWatchdog

USER_AGENT = "onceonly-webhooks/0.1"
ABORT_HEADER = "webhook-delivery"
ABORT_VALUE = "abort-message"
# Headers the sender sets itself: a subscription's own headers never replace them (compared lower-case).
SENDER_HEADERS = frozenset({"host", "content-type", "content-length", "user-agent", "accept-encoding",
                            "connection", "transfer-encoding"})


@dataclass(frozen=True)
class SendResult:
    status_code: int | None  # None: no HTTP response (timeout, refused connection, …)
    error: str | None  # short reason on failure; never the request body
    retry_after: str | None = None  # the raw Retry-After header of a 429/503 (backoff.py parses it)
    elapsed: float = 0.0
    aborted: bool = False  # the receiver answered `webhook-delivery: abort-message` (Svix): stop retrying

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


class WebhookSender:
    """One per container. ``connect_timeout`` caps the TCP connect and
    ``read_timeout`` any single wait for bytes; the deadline passed to
    :meth:`post` (default: ``attempt_timeout`` from now) bounds the whole request."""

    def __init__(self, connect_timeout: float, read_timeout: float, ca_bundle: str | None = None,
                 attempt_timeout: float | None = None) -> None:
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.attempt_timeout = attempt_timeout or connect_timeout + read_timeout
        # check_hostname + CERT_REQUIRED: the certificate must name the real host.
        self._tls = ssl.create_default_context(cafile=ca_bundle or certifi.where())

    def post(self, target: Target, body: str, headers: dict[str, str],
             deadline: Budget | None = None) -> SendResult:
        deadline = deadline or Budget.after(self.attempt_timeout)
        started = time.monotonic()
        watchdog = SocketWatchdog(deadline)
        sock: socket.socket | None = None
        try:
            sock = self._connect(target, deadline, watchdog)
            connection = http.client.HTTPConnection(target.address, target.port)
            connection.sock = sock  # already connected (and TLS-wrapped): never dials again
            own = {name: value for name, value in headers.items() if name.lower() not in SENDER_HEADERS}
            connection.request("POST", target.path, body=body.encode("utf-8"), headers={
                **own, "Host": target.host_header, "Content-Type": "application/json",
                "User-Agent": USER_AGENT, "Accept-Encoding": "identity", "Connection": "close"})
            response = connection.getresponse()
            if watchdog.fired:
                # The shutdown reads as end of stream, and http.client takes an
                # end of stream among the headers for their end: not a response.
                raise DeadlineExceededError("the attempt's deadline passed")
            status = response.status
            retry_after = response.getheader("Retry-After") if status in RETRY_AFTER_STATUSES else None
            error = None if 200 <= status < 300 else f"HTTP {status}: {_snippet(response, watchdog)}"
            aborted = (response.getheader(ABORT_HEADER) or "").strip().lower() == ABORT_VALUE
            return SendResult(status, error, retry_after, time.monotonic() - started, aborted)
        except (OSError, http.client.HTTPException) as exc:
            return SendResult(None, _reason(exc, watchdog, deadline), elapsed=time.monotonic() - started)
        except (UnicodeError, ValueError) as exc:
            # A request the client cannot encode (a target built without the
            # SSRF guard's encoding): a failed attempt with its reason, never a crash.
            return SendResult(None, f"request not sent: {exc.__class__.__name__}: {str(exc)[:120]}",
                              elapsed=time.monotonic() - started)
        finally:
            watchdog.stop()  # before the close: the watchdog never touches a closed descriptor
            if sock is not None:
                sock.close()

    def _connect(self, target: Target, deadline: Budget, watchdog: SocketWatchdog) -> socket.socket:
        sock = socket.create_connection((target.address, target.port),
                                        timeout=deadline.socket_timeout(self.connect_timeout))
        watchdog.watch(sock)
        if target.scheme == "https":
            # The handshake runs after the wrap, so the watchdog can cut it short too.
            sock = self._tls.wrap_socket(sock, server_hostname=target.host, do_handshake_on_connect=False)
            watchdog.watch(sock)
            sock.settimeout(deadline.socket_timeout(self.read_timeout))
            sock.do_handshake()
        sock.settimeout(deadline.socket_timeout(self.read_timeout))
        return sock


def _reason(exc: BaseException, watchdog: SocketWatchdog, deadline: Budget) -> str:
    """A short error text: the class of failure, never the request body."""
    if watchdog.fired or isinstance(exc, DeadlineExceededError) or deadline.remaining() <= 0:
        return "timeout: the attempt's deadline passed"
    if isinstance(exc, TimeoutError):
        return f"timeout: {exc.__class__.__name__}"
    if isinstance(exc, ssl.SSLError):
        return f"connection failed: SSLError ({exc.__class__.__name__}: {getattr(exc, 'reason', None) or exc})"
    if isinstance(exc, http.client.HTTPException):
        return f"bad response: {exc.__class__.__name__}"
    return f"connection failed: {exc.__class__.__name__}"


def _snippet(response: http.client.HTTPResponse, watchdog: SocketWatchdog) -> str:
    try:
        raw = response.read(MAX_RESPONSE_BYTES) or b""
    except (OSError, http.client.HTTPException) as exc:
        why = "deadline passed" if watchdog.fired else exc.__class__.__name__
        return f"(body unreadable: {why})"
    return raw.decode("utf-8", "replace").strip()[:MAX_RESPONSE_BYTES] or "(empty body)"
