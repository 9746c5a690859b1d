"""The sender against the local receiver: one deadline bounds the whole request,
redirects are not followed, Retry-After is read, error text is short."""

from __future__ import annotations

import threading
import time

from onceonly_app.webhooks.sender import WebhookSender
from onceonly_app.webhooks.signing import new_secret, signed_headers
from onceonly_app.webhooks.ssrf import check_target
from onceonly_cli.testing.receiver import Reply, WebhookReceiver

LOCAL = {"127.0.0.1"}


def _post(rx: WebhookReceiver, url: str, secret: str, msg_id: str, sender: WebhookSender) -> object:
    body = '{"n":1}'
    return sender.post(check_target(url, LOCAL), body, signed_headers(secret, msg_id, body, time.time()))


def test_a_slow_endpoint_hits_the_read_timeout() -> None:
    secret, gate = new_secret(), threading.Event()
    with WebhookReceiver() as rx:
        url = rx.endpoint("slow", secret)
        rx.script("msg_slow", [Reply(200, hold=gate)])
        started = time.monotonic()
        result = _post(rx, url, secret, "msg_slow", WebhookSender(connect_timeout=1, read_timeout=0.5))
        elapsed = time.monotonic() - started
        gate.set()
    assert result.status_code is None and result.error.startswith("timeout")  # type: ignore[attr-defined]
    assert elapsed < 5  # bounded by the read timeout, not by the endpoint
    assert [r.webhook_id for r in rx.history()] == ["msg_slow"]


def test_redirects_are_not_followed_and_retry_after_is_read() -> None:
    secret = new_secret()
    sender = WebhookSender(1, 5)
    with WebhookReceiver() as rx:
        url = rx.endpoint("r", secret)
        rx.script("msg_a", [Reply(302), Reply(429, retry_after="7"), Reply(503, retry_after="x"), Reply(201)])
        results = [_post(rx, url, secret, "msg_a", sender) for _ in range(4)]
    codes = [(r.status_code, r.retry_after, r.ok) for r in results]  # type: ignore[attr-defined]
    assert codes == [(302, None, False), (429, "7", False), (503, "x", False), (201, None, True)]
    assert results[1].error == "HTTP 429: status 429"  # type: ignore[attr-defined]
    assert len(rx.history("msg_a")) == 4  # the 302 was not followed anywhere


def test_the_receiver_rejects_a_bad_signature() -> None:
    secret = new_secret()
    with WebhookReceiver() as rx:
        url = rx.endpoint("r", secret)
        result = _post(rx, url, new_secret(), "msg_forged", WebhookSender(1, 5))
    assert result.status_code == 401  # type: ignore[attr-defined]
    (request,) = rx.history()
    assert not request.verified and request.error == "No matching signature found"
    assert rx.successes() == {}


def test_a_trickling_endpoint_is_cut_off_at_the_attempt_deadline() -> None:
    """Every byte comes within the read timeout (5 s), so per-read timeouts never
    fire: the whole answer would take about 8 s. The one deadline (1 s) ends it."""
    secret = new_secret()
    bound = 1.0
    with WebhookReceiver() as rx:
        url = rx.endpoint("trickle", secret)
        rx.script("msg_t", [Reply(200, trickle=0.05)])
        started = time.monotonic()
        result = _post(rx, url, secret, "msg_t", WebhookSender(1, 5, attempt_timeout=bound))
        elapsed = time.monotonic() - started
    assert (result.status_code, result.error) == (None, "timeout: the attempt's deadline passed")  # type: ignore[attr-defined]
    assert elapsed < 2 * bound
    assert [r.webhook_id for r in rx.history()] == ["msg_t"]  # the request itself went out


def test_a_fast_endpoint_is_unaffected_by_the_deadline() -> None:
    secret = new_secret()
    with WebhookReceiver() as rx:
        url = rx.endpoint("fast", secret)
        rx.script("msg_f", [Reply(500, body=b"x" * 2000)])
        result = _post(rx, url, secret, "msg_f", WebhookSender(1, 5, attempt_timeout=1.0))
    assert result.status_code == 500  # type: ignore[attr-defined]
    assert result.error == "HTTP 500: " + "x" * 512  # type: ignore[attr-defined]
