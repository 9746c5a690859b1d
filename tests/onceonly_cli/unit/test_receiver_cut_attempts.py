"""A sender killed mid-body leaves the receiver a request shorter than its
Content-Length (or a reset). Like a real web server, the receiver records it
as a cut attempt and never hands it to the endpoint: the judges do not call it
unsigned or cross-tenant, and count it with the repeat POSTs a crash explains."""

from __future__ import annotations

import json
import socket
import struct
import time
from collections import Counter

import pytest

from onceonly_app.webhooks.signing import new_secret, signed_headers
from onceonly_cli.simulate.report import DeliveryFacts, build_report
from onceonly_cli.simulate.webhook_checks import judge_tenants, requests_of
from onceonly_cli.simulate.webhook_load import tally_receiver
from onceonly_cli.testing.receiver import WebhookReceiver

TENANT = "tenant-a"
MSG_ID = "msg_cut"


def _raw_request(port: int, secret: str, *, send: float, reset: bool) -> bytes:
    """POST a signed request over a raw socket, sending only ``send`` of its
    body, then close it (FIN) or reset it (RST), as a killed process's kernel
    does; a whole request waits for the answer's status line, which it returns."""
    body = json.dumps({"type": "invoice.paid", "data": {"tenant_id": TENANT, "invoice": "inv_1"}}).encode()
    headers = signed_headers(secret, MSG_ID, body.decode(), time.time())
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    request = (f"POST /a HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n{head}"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body[:int(len(body) * send)]
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        if reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        return sock.makefile("rb").readline() if send >= 1 else b""


def _facts(rx: WebhookReceiver, accepted: Counter[str]) -> DeliveryFacts:
    seen = tally_receiver(rx, {"a"})
    assert seen.accepted == accepted
    return DeliveryFacts(
        events_in=1, messages_sent=1, duplicate_messages=0, expected_ids={MSG_ID}, statuses={MSG_ID: "succeeded"},
        accepted=seen.accepted, requests=seen.requests, cut_attempts=seen.cut_attempts, unverified=seen.unverified,
        first_sent={MSG_ID: time.time() - 5}, first_accepted=seen.first_accepted, fenced_refused=0,
        sqs_redriven=0, sqs_parked=0)


def _verdicts(facts: DeliveryFacts, kills: int) -> dict[str, dict[str, object]]:
    now = time.time()
    report = build_report(config={}, started=now - 5, finished=now, replicas=1, deliveries=facts, ticks=[],
                          effects=[], invocations=[], kills=kills, restarts=kills, drained=True, drain_detail="")
    return {i["name"]: i for i in report["invariants"]}


@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
def test_a_request_cut_mid_body_is_a_cut_attempt_not_an_unsigned_or_cross_tenant_request(reset: bool) -> None:
    secret = new_secret()
    with WebhookReceiver(quiet=True) as rx:
        rx.endpoint("a", secret)
        port = int(rx.base_url.rsplit(":", 1)[1])
        _raw_request(port, secret, send=0.5, reset=reset)
        assert rx.wait_for_cut_attempts(1, timeout=10), "the receiver never noticed the cut request"
        assert _raw_request(port, secret, send=1.0, reset=False).startswith(b"HTTP/1.1 200")  # the retry, whole
        (cut,) = rx.cut_attempts
        (whole,) = rx.history()
        assert (cut.webhook_id, cut.endpoint, cut.received < cut.declared) == (MSG_ID, "a", True)
        assert whole.verified and whole.nth == 1 and whole.status == 200  # the endpoint saw one request only
        tenants = judge_tenants([{"id": "x", "tenant_id": TENANT, "subscription_tenant": "b", "status": "dead",
                                  "webhook_id": "b"}], [], requests_of(rx.history(), {"a"}), {"a": TENANT}, {"x"})
        facts = _facts(rx, Counter({MSG_ID: 1}))
    assert tenants.ok, tenants.detail
    assert (facts.requests, facts.unverified, facts.cut_attempts) == (1, 0, 1)
    verdicts = _verdicts(facts, kills=1)
    assert verdicts["every request signed"]["ok"], verdicts["every request signed"]
    assert verdicts["duplicate POSTs only after crashes"]["ok"]
    assert "1 cut attempts" in verdicts["duplicate POSTs only after crashes"]["detail"]


def test_a_cut_attempt_still_needs_a_crash_of_its_own() -> None:
    # A cut attempt with no replica killed is not explained by a crash: the
    # repeat-POST accounting counts it and fails.
    secret = new_secret()
    with WebhookReceiver(quiet=True) as rx:
        rx.endpoint("a", secret)
        port = int(rx.base_url.rsplit(":", 1)[1])
        _raw_request(port, secret, send=0.3, reset=False)
        assert rx.wait_for_cut_attempts(1, timeout=10)
        assert _raw_request(port, secret, send=1.0, reset=False).startswith(b"HTTP/1.1 200")
        facts = _facts(rx, Counter({MSG_ID: 1}))
    verdicts = _verdicts(facts, kills=0)
    assert not verdicts["duplicate POSTs only after crashes"]["ok"]
