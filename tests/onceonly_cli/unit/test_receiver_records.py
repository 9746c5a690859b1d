"""What the local receiver records for simulate's judges: the Retry-After it
sent, and whether the sender read its answer whole. A 2xx the sender hung up on
(a trickled answer cut at the attempt's deadline) is not an accepted delivery."""

from __future__ import annotations

import time

from onceonly_app.runtime.budget import Budget
from onceonly_app.webhooks.sender import WebhookSender
from onceonly_app.webhooks.signing import new_secret, signed_headers
from onceonly_app.webhooks.ssrf import check_target
from onceonly_cli.testing.receiver import Reply, WebhookReceiver

LOCAL = {"127.0.0.1"}


def _post(url: str, secret: str, msg_id: str, deadline: float) -> object:
    body = '{"n":1}'
    sender = WebhookSender(1, 5, attempt_timeout=deadline)
    return sender.post(check_target(url, LOCAL), body, signed_headers(secret, msg_id, body, time.time()),
                       Budget.after(deadline))


def test_a_trickled_answer_the_sender_hung_up_on_is_recorded_cut_and_not_accepted() -> None:
    secret = new_secret()
    with WebhookReceiver() as rx:
        url = rx.endpoint("trickle", secret)
        rx.script("msg_t", [Reply(200, trickle=0.1), Reply(200)])
        cut = _post(url, secret, "msg_t", deadline=0.5)
        assert rx.wait_for(lambda requests: requests[0].cut, timeout=30), "the receiver never noticed the hang-up"
        whole = _post(url, secret, "msg_t", deadline=5)
        first, second = rx.history("msg_t")
    assert cut.status_code is None and whole.ok  # type: ignore[attr-defined]
    assert (first.status, first.trickled, first.cut, first.accepted) == (200, True, True, False)
    assert (second.status, second.trickled, second.cut, second.accepted) == (200, False, False, True)
    assert rx.successes() == {"msg_t": 1}


def test_the_retry_after_sent_is_recorded_with_the_request() -> None:
    secret = new_secret()
    with WebhookReceiver() as rx:
        url = rx.endpoint("hostile", secret)
        rx.script("msg_h", [Reply(429, retry_after="9" * 40)])
        result = _post(url, secret, "msg_h", deadline=5)
        (request,) = rx.history("msg_h")
    assert result.retry_after == "9" * 40  # type: ignore[attr-defined]
    assert (request.status, request.retry_after, request.accepted) == (429, "9" * 40, False)
