"""Test helpers for webhook delivery: subscriptions with unique ids, SQS-shaped
events, the environment the handlers read, and queries of one test's own rows."""

from __future__ import annotations

import json
import os
import secrets
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row

from onceonly_app.webhooks.signing import new_secret
from onceonly_cli.local.lambda_runtime import Handler, LambdaContext, load_handler
from onceonly_cli.testing.receiver import Behaviour, ReceivedRequest, WebhookReceiver
from tests.support import REPO_ROOT
from tests.support.functions.events import EVENTS_DIR, scheduled_event

DISPATCH_DIR = REPO_ROOT / "functions" / "webhook_dispatch"
RETRY_DIR = REPO_ROOT / "functions" / "webhook_retry"


TENANT = "tenant-webhooks"  # the tenant of subscriptions and messages unless a test names another


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(6)}"


# The per-endpoint limits' upper bounds: the tests of other features count claims
# and attempts exactly, which a held-back attempt (claimed again) would change.
# The limits' own tests create capped subscriptions (test_webhooks_endpoint_limits.py).
UNLIMITED = {"max_in_flight": 1000, "rate_per_second": 10000.0}


def create_subscription(postgres_url: str, url: str, secret: str, *, enabled: bool = True,
                        webhook_id: str | None = None, tenant_id: str = TENANT) -> str:
    webhook_id = webhook_id or new_id("wh")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("INSERT INTO webhook_subscriptions (id, tenant_id, url, secret, enabled, max_in_flight,"
                     " rate_per_second) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                     (webhook_id, tenant_id, url, secret, enabled, UNLIMITED["max_in_flight"],
                      UNLIMITED["rate_per_second"]))
    return webhook_id


def subscribe(postgres_url: str, receiver: WebhookReceiver, behaviour: Behaviour | None = None) -> str:
    """A subscription of TENANT to a new endpoint of ``receiver``."""
    secret = new_secret()
    return create_subscription(postgres_url, receiver.endpoint(new_id("ep"), secret, behaviour), secret)


def message(webhook_id: str, event_id: str, event_type: str = "invoice.paid",
            payload: Any = None, tenant_id: str = TENANT) -> str:
    return json.dumps({"webhook_id": webhook_id, "tenant_id": tenant_id, "event_id": event_id,
                       "event_type": event_type,
                       "payload": payload if payload is not None else {"invoice": event_id, "amount": 4200}})


def sqs_event(bodies: list[str]) -> dict[str, Any]:
    """An SQS event as Lambda delivers it (the shape of events/webhook_dispatch.json)."""
    template = json.loads((EVENTS_DIR / "webhook_dispatch.json").read_text())["Records"][0]
    records = []
    for body in bodies:
        record = json.loads(json.dumps(template))
        record.update(messageId=str(uuid.uuid4()), receiptHandle=secrets.token_hex(16), body=body)
        records.append(record)
    return {"Records": records}


def webhook_env(postgres_url: str, store_url: str, **overrides: str) -> dict[str, str]:
    """What the handlers read: stores, and short leases/schedules for tests."""
    env = {
        "DATABASE_URL": postgres_url,
        "ONCEONLY_STORE_URL": store_url,
        "WEBHOOK_ALLOW_HTTP_HOSTS": "127.0.0.1,localhost",
        "WEBHOOK_CONNECT_TIMEOUT_SECONDS": "2",
        "WEBHOOK_READ_TIMEOUT_SECONDS": "5",
        "WEBHOOK_ATTEMPT_LEASE_SECONDS": "30",
        "WEBHOOK_CLAIM_BATCH": "4",
        "WEBHOOK_DEADLINE_MARGIN_SECONDS": "1",
        "WEBHOOK_RETRY_SCHEDULE_SECONDS": "0.2,0.2,0.2",
        "POWERTOOLS_METRICS_NAMESPACE": "onceonly-test",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }
    env.update(overrides)
    return env


def deliveries(postgres_url: str, ids: list[str]) -> dict[str, dict[str, Any]]:
    with psycopg.connect(postgres_url) as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute("SELECT * FROM webhook_deliveries WHERE id = ANY(%s)", (ids,))
        return {row["id"]: row for row in cur.fetchall()}


def deliveries_for(postgres_url: str, webhook_ids: list[str]) -> list[dict[str, Any]]:
    with psycopg.connect(postgres_url) as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute("SELECT * FROM webhook_deliveries WHERE webhook_id = ANY(%s) ORDER BY id", (webhook_ids,))
        return cur.fetchall()


def attempts(postgres_url: str, delivery_ids: list[str]) -> list[dict[str, Any]]:
    with psycopg.connect(postgres_url) as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute("SELECT * FROM webhook_attempts WHERE delivery_id = ANY(%s) ORDER BY id", (delivery_ids,))
        return cur.fetchall()


def sleep_until_due(postgres_url: str, delivery_id: str) -> None:
    """Sleep until a retrying delivery's next attempt is due (one computed sleep,
    not a poll), so a worker started next is sure to find it claimable."""
    next_attempt_at = deliveries(postgres_url, [delivery_id])[delivery_id]["next_attempt_at"]
    assert next_attempt_at is not None, f"{delivery_id} is not waiting for a retry"
    time.sleep(max(0.0, next_attempt_at.timestamp() - time.time()) + 0.05)


def subscription(postgres_url: str, webhook_id: str) -> dict[str, Any]:
    with psycopg.connect(postgres_url) as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute("SELECT * FROM webhook_subscriptions WHERE id = %s", (webhook_id,))
        row = cur.fetchone()
        assert row is not None
        return row


@contextmanager
def lambda_env(env: dict[str, str]) -> Iterator[tuple[Handler, Handler]]:
    """Load the real dispatch and retry handlers in this process with ``env`` set,
    with fresh per-container clients; restores everything afterwards."""
    from onceonly_app.webhooks import runtime

    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    runtime.reset()
    try:
        yield load_handler(DISPATCH_DIR, "app.handler"), load_handler(RETRY_DIR, "app.handler")
    finally:
        runtime.reset()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def context(name: str, timeout: float = 60.0) -> LambdaContext:
    return LambdaContext(function_name=name, timeout_seconds=timeout)


def drive_retries(retry: Handler, done: Callable[[], bool], timeout: float = 30.0) -> list[dict[str, Any]]:
    """Invoke the retry handler (as the schedule would, only more often) until
    ``done()`` holds; returns each invocation's summary."""
    summaries: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not done after {timeout:.0f}s of retries: {summaries[-3:]}"
        summaries.append(retry(scheduled_event("webhook_retry"), context("retry", 20)))
        time.sleep(0.1)
    return summaries


def most_in_flight(requests: Iterable[ReceivedRequest]) -> int:
    """The largest number of requests the receiver held at the same moment (one
    not answered yet counts as held until now)."""
    held = list(requests)
    # An answer sorts before an arrival at the same instant (-1 < 1).
    events = sorted([(r.received_at, 1) for r in held] + [(r.answered_at or time.time(), -1) for r in held])
    most = current = 0
    for _, step in events:
        current += step
        most = max(most, current)
    return most
