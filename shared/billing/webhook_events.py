"""Webhook events for the dispatcher: written to an outbox in the transaction of
the change (so a crash cannot lose them), then sent to its SQS queue, one
message per subscription: ``{"webhook_id", "event_id", "event_type", "payload"}``.

A crash after SQS accepted a message but before it was marked sent re-sends it
on the next flush; the dispatcher dedupes on (webhook_id, event_id)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from botocore.exceptions import BotoCoreError, ClientError
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from onceonly.stores.sqlfile import load_queries

SQL = load_queries(Path(__file__).with_suffix(".sql"))
FLUSH_BATCH = 100


def invoice_paid_event_id(transaction_hash: str) -> str:
    """Stable per payment, so a re-sent event dedupes at the dispatcher."""
    return "evt_" + hashlib.sha256(f"invoice.paid:{transaction_hash}".encode()).hexdigest()[:32]


def fan_out(conn: psycopg.Connection[Any], event_id: str, event_type: str, tenant_id: str,
            payload: dict[str, Any]) -> None:
    """Queue the event for every enabled subscription, inside the caller's transaction."""
    conn.execute(SQL["fan_out"], {"event_id": event_id, "event_type": event_type, "tenant_id": tenant_id,
                                  "payload": json.dumps(payload, separators=(",", ":"), sort_keys=True)})


@dataclass
class FlushResult:
    sent: int = 0
    failed: int = 0  # left unsent for the next flush


def flush(pool: ConnectionPool, sqs: Any, queue_url: str, *, tenant: str | None = None,
          log: Any = None) -> FlushResult:
    """Send every unsent outbox row to SQS (batch by batch) and mark it sent.
    A failing send stops the flush; what is left goes out with the next one."""
    result = FlushResult()
    while True:
        # Leaving the block normally (also by return) commits the marks made so far.
        with pool.connection() as conn, conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(SQL["lock_unsent"], {"tenant": tenant, "limit": FLUSH_BATCH}).fetchall()
            for done, row in enumerate(rows):
                body = {"webhook_id": row["webhook_id"], "event_id": row["event_id"],
                        "event_type": row["event_type"], "payload": row["payload"]}
                try:
                    sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps(body, separators=(",", ":")))
                except (ClientError, BotoCoreError) as exc:
                    result.failed = len(rows) - done
                    if log is not None:
                        log.error("webhook event not sent; the next run retries it",
                                  extra={"event_id": row["event_id"], "webhook_id": row["webhook_id"],
                                         "error": type(exc).__name__})
                    return result
                cur.execute(SQL["mark_sent"], {"event_id": row["event_id"], "webhook_id": row["webhook_id"]})
                result.sent += 1
        if len(rows) < FLUSH_BATCH:
            return result
