"""Parsing the SQS message body of a delivery request."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from onceonly_app.webhooks.messages import DeliveryRequest, MalformedMessageError, parse_message

GOOD = {"webhook_id": "wh_1", "tenant_id": "t_1", "event_id": "evt_1", "event_type": "invoice.paid",
        "payload": {"a": 1}}


def test_parses_a_valid_body() -> None:
    assert parse_message(json.dumps(GOOD)) == DeliveryRequest("wh_1", "evt_1", "invoice.paid", {"a": 1}, "t_1")
    assert parse_message(json.dumps(GOOD).encode()).event_id == "evt_1"


def test_reads_the_event_time_and_sequence() -> None:
    request = parse_message(json.dumps({**GOOD, "occurred_at": "2026-11-29T10:07:00.25+00:00", "sequence": 7}))
    assert request.occurred_at == datetime(2026, 11, 29, 10, 7, 0, 250000, tzinfo=UTC)
    assert request.sequence == 7


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (None, "empty message body"),
        ("   ", "empty message body"),
        ("{not json", "not JSON"),
        ('["a"]', "must be a JSON object, got list"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "event_id"}), "missing field.*event_id"),
        (json.dumps({"payload": {}}), "missing field.*webhook_id, tenant_id, event_id, event_type"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "tenant_id"}), "missing field.*tenant_id"),
        (json.dumps({**GOOD, "tenant_id": " "}), "tenant_id must be a non-empty string"),
        (json.dumps({**GOOD, "occurred_at": "yesterday"}), "occurred_at must be an ISO 8601 time"),
        (json.dumps({**GOOD, "occurred_at": "2026-11-29T10:07:00"}), "occurred_at must be .* with an offset"),
        (json.dumps({**GOOD, "occurred_at": 1764410820}), "occurred_at must be an ISO 8601 time"),
        (json.dumps({**GOOD, "sequence": -1}), "sequence must be a non-negative"),
        (json.dumps({**GOOD, "sequence": "3"}), "sequence must be a non-negative"),
        (json.dumps({**GOOD, "sequence": True}), "sequence must be a non-negative"),
        (json.dumps({**GOOD, "webhook_id": ""}), "webhook_id must be a non-empty string"),
        (json.dumps({**GOOD, "event_id": 42}), "event_id must be a non-empty string, got int"),
        (json.dumps({**GOOD, "event_type": "x" * 300}), "event_type is longer than 256"),
        (json.dumps({**GOOD, "payload": None}), "payload must not be null"),
    ],
)
def test_malformed_bodies_say_what_is_wrong(body: str | None, reason: str) -> None:
    with pytest.raises(MalformedMessageError, match=reason):
        parse_message(body)


def test_the_reason_never_quotes_the_payload() -> None:
    secret_payload = {"card": "4242-4242-4242-4242"}
    body = json.dumps({**GOOD, "event_id": None, "payload": secret_payload})
    with pytest.raises(MalformedMessageError) as info:
        parse_message(body)
    assert "4242" not in str(info.value)
