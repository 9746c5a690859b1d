"""Payload size limits (docs/security.md): the outbox refuses an oversize
webhook payload when the event is enqueued, its SQS batches stay under the
request limit, the dispatcher delivers a payload at the limit and refuses one
byte more, the queue itself refuses larger messages, and only the first
MAX_RESPONSE_BYTES of a receiver's answer are ever read."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

import onceonly
from onceonly_app.events.limits import MAX_PAYLOAD_BYTES, MAX_RESPONSE_BYTES, SQS_MAX_BATCH_BYTES, PayloadError
from onceonly_app.events.outbox import SQS_BATCH, fan_out, message_body, sqs_batches
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.sender import WebhookSender
from onceonly_app.webhooks.signing import new_secret
from onceonly_app.webhooks.ssrf import check_target
from onceonly_cli.local.template import load_template
from onceonly_cli.testing.receiver import WebhookReceiver
from tests.support import REPO_ROOT
from tests.support.delivery.webhooks import (
    context,
    create_subscription,
    deliveries,
    lambda_env,
    message,
    new_id,
    sqs_event,
    subscribe,
    webhook_env,
)


def payload_of_size(size: int) -> dict[str, str]:
    """A payload whose compact JSON is exactly ``size`` bytes."""
    return {"blob": "x" * (size - len('{"blob":""}'))}


def outbox_rows(db: str, event_id: str) -> int:
    with psycopg.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM webhook_outbox WHERE event_id = %s", (event_id,))
                   .fetchone()[0])  # type: ignore[index]


def test_the_outbox_refuses_an_oversize_payload_when_the_event_is_enqueued(webhook_db: str) -> None:
    tenant = new_id("tenant")
    create_subscription(webhook_db, "https://hooks.example.com/x", new_secret(), tenant_id=tenant)
    at_limit, over = new_id("evt"), new_id("evt")
    with psycopg.connect(webhook_db) as conn:
        fan_out(conn, at_limit, "invoice.paid", tenant, payload_of_size(MAX_PAYLOAD_BYTES))
    with psycopg.connect(webhook_db) as conn, pytest.raises(PayloadError, match=f"at most {MAX_PAYLOAD_BYTES}"):
        fan_out(conn, over, "invoice.paid", tenant, payload_of_size(MAX_PAYLOAD_BYTES + 1))
    assert (outbox_rows(webhook_db, at_limit), outbox_rows(webhook_db, over)) == (1, 0)


def _outbox_row(n: int, payload: Any) -> dict[str, Any]:
    return {"webhook_id": f"wh-{n}", "tenant_id": "t", "event_id": f"evt-{n}", "event_type": "invoice.paid",
            "payload": payload, "created_at": datetime.now(UTC), "event_sequence": n}


def test_outbox_batches_stay_under_the_sqs_request_limit() -> None:
    big = [_outbox_row(n, payload_of_size(MAX_PAYLOAD_BYTES)) for n in range(12)]
    small = [_outbox_row(n, {"n": n}) for n in range(23)]
    for rows in (big, small):
        batches = sqs_batches(rows)
        assert [row for batch in batches for row, _ in batch] == rows  # every row once, in order
        for batch in batches:
            assert 1 <= len(batch) <= SQS_BATCH
            assert all(body == message_body(row) for row, body in batch)
            assert sum(len(body.encode()) for _, body in batch) <= SQS_MAX_BATCH_BYTES
    assert [len(b) for b in sqs_batches(small)] == [10, 10, 3]
    assert len(sqs_batches(big)) >= 4  # at most 3 near-limit messages fit in one request


def test_the_dispatcher_delivers_a_payload_at_the_limit_and_refuses_one_byte_more(
        webhook_db: str, postgres_url: str, pg_store: onceonly.Store, receiver: WebhookReceiver) -> None:
    webhook_id = subscribe(webhook_db, receiver)
    at_limit, over = payload_of_size(MAX_PAYLOAD_BYTES), payload_of_size(MAX_PAYLOAD_BYTES + 1)
    event = sqs_event([message(webhook_id, "evt-at-limit", payload=at_limit),
                       message(webhook_id, "evt-over", payload=over)])
    with lambda_env(webhook_env(webhook_db, postgres_url)) as (dispatch, _):
        response = dispatch(event, context("dispatch"))
    assert response == {"batchItemFailures": [{"itemIdentifier": event["Records"][1]["messageId"]}]}
    delivered = delivery_id_for(webhook_id, "evt-at-limit")
    assert deliveries(webhook_db, [delivered, delivery_id_for(webhook_id, "evt-over")]).keys() == {delivered}
    (received,) = receiver.history(delivered)
    assert received.verified and json.loads(received.body)["data"] == at_limit


def test_the_queue_refuses_messages_above_the_limit() -> None:
    queue = load_template(REPO_ROOT / "template.yaml")["Resources"]["WebhookQueue"]["Properties"]
    assert queue["MaximumMessageSize"] == SQS_MAX_BATCH_BYTES


@contextmanager
def endless_error_endpoint() -> Iterator[str]:
    """An endpoint answering 500 with a body that never ends (it streams until the
    client hangs up): a client reading the whole body would never finish."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.settimeout(5)
            while b"\r\n\r\n" not in conn.recv(65536):
                pass
            try:
                conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 1000000000\r\n\r\n")
                while not stop.is_set():
                    conn.sendall(b"x" * 65536)
            except OSError:
                return  # the client hung up: what a bounded reader does

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/hook"
    finally:
        stop.set()
        thread.join(10)
        server.close()


def test_only_the_first_bytes_of_a_receivers_answer_are_read() -> None:
    sender = WebhookSender(connect_timeout=2, read_timeout=2, attempt_timeout=3)
    with endless_error_endpoint() as url:
        result = sender.post(check_target(url, {"127.0.0.1"}), "{}", {"webhook-id": "msg_x"})
    # A reader of the whole body would have run into the deadline instead.
    assert result.status_code == 500
    assert result.error == "HTTP 500: " + "x" * MAX_RESPONSE_BYTES
