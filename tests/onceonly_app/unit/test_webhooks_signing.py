"""Signatures are made by the standardwebhooks package and verify with its
Webhook.verify, the check a receiver makes."""

from __future__ import annotations

import time

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.signing import new_secret, signed_headers


def test_headers_verify_with_standardwebhooks() -> None:
    secret = new_secret()
    body = '{"type":"invoice.paid","data":{"amount":1}}'
    msg_id = delivery_id_for("wh_1", "evt_1")
    headers = signed_headers(secret, msg_id, body, time.time())
    assert headers["webhook-id"] == msg_id
    assert headers["webhook-signature"].startswith("v1,")
    assert Webhook(secret).verify(body, headers) == {"type": "invoice.paid", "data": {"amount": 1}}


def test_a_tampered_body_or_another_secret_fails() -> None:
    secret = new_secret()
    headers = signed_headers(secret, "msg_x", '{"a":1}', time.time())
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify('{"a":2}', headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify('{"a":1}', headers)


def test_the_id_is_stable_per_webhook_and_event() -> None:
    assert delivery_id_for("wh_1", "evt_1") == delivery_id_for("wh_1", "evt_1")
    assert delivery_id_for("wh_1", "evt_1").startswith("msg_")
    assert delivery_id_for("wh_1", "evt_1") != delivery_id_for("wh_2", "evt_1")
    # the separator keeps ("a", "bc") and ("ab", "c") apart
    assert delivery_id_for("a", "bc") != delivery_id_for("ab", "c")


def test_secrets_are_fresh_whsec_keys() -> None:
    a, b = new_secret(), new_secret()
    assert a.startswith("whsec_") and a != b
