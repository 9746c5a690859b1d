"""The webhook events' outbox: each event is written in the transaction of
the change (so a crash cannot lose them), one row per subscription of the
event's tenant that is not deleted (a disabled one's delivery is held), then
sent to its SQS queue, one message per subscription:
``{"webhook_id", "tenant_id", "event_id", "event_type", "payload", "occurred_at",
"sequence"}`` (webhooks/messages.py).

A crash after SQS accepted a message but before it was marked sent re-sends it
on the next flush; the dispatcher dedupes on (webhook_id, event_id)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from botocore.exceptions import BotoCoreError, ClientError
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from onceonly.errors import ConfigError
from onceonly_app.batching import batches
from onceonly_app.runtime.aws import CALL_SECONDS
from onceonly_app.runtime.budget import Budget
from onceonly_app.sql_queries import load_queries

from .limits import SQS_MAX_BATCH_BYTES, encoded_payload
from .types import EVENT_TYPES

SQL = load_queries(Path(__file__).with_suffix(".sql"))
FLUSH_BATCH = 100
SQS_BATCH = 10  # SendMessageBatch takes at most 10 entries


def fan_out(conn: psycopg.Connection[Any], event_id: str, event_type: str, tenant_id: str,
            payload: dict[str, Any]) -> None:
    """Queue the event for every subscription of ``tenant_id`` not deleted, inside the
    caller's transaction (the change's: its time is the event's ``occurred_at``).
    Raises ConfigError for an event type not in EVENT_TYPES, and PayloadError
    (nothing queued) for a payload over limits.MAX_PAYLOAD_BYTES."""
    if event_type not in EVENT_TYPES:
        raise ConfigError(f"unknown webhook event type {event_type!r}: add it to events.types.EVENT_TYPES")
    conn.execute(SQL["fan_out"], {"event_id": event_id, "event_type": event_type, "tenant_id": tenant_id,
                                  "payload": encoded_payload(payload)})


@dataclass
class FlushResult:
    sent: int = 0
    failed: int = 0  # left unsent for the next flush
    out_of_time: bool = False  # stopped near the invocation's deadline; the next flush goes on


def flush(pool: ConnectionPool, sqs: Any, queue_url: str, *, tenant: str | None = None,
          budget: Budget | None = None, log: Any = None) -> FlushResult:
    """Send every unsent outbox row to SQS and mark it sent, batch by batch,
    while the budget covers one more SQS call (``sqs`` is a client with bounded
    timeouts: aws.bounded_client). Rows not sent stay for the next flush."""
    budget = budget or Budget.unlimited()
    result = FlushResult()
    while True:
        # Leaving the block normally commits the marks; the row locks keep a
        # concurrent flush off these rows meanwhile.
        with pool.connection() as conn, conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(SQL["lock_unsent"], {"tenant": tenant, "limit": FLUSH_BATCH}).fetchall()
            for batch in sqs_batches(rows):
                if not budget.allows(CALL_SECONDS):
                    result.out_of_time = True
                    return result
                sent = _send_batch(sqs, queue_url, batch, log)
                if sent:
                    cur.executemany(SQL["mark_sent"], [{"event_id": r["event_id"], "webhook_id": r["webhook_id"]}
                                                       for r in sent])
                result.sent += len(sent)
                result.failed += len(batch) - len(sent)
        if len(rows) < FLUSH_BATCH or result.failed:
            return result


def message_body(row: dict[str, Any]) -> str:
    """The dispatcher's SQS message (webhooks/messages.py) for one outbox row."""
    return json.dumps({"webhook_id": row["webhook_id"], "tenant_id": row["tenant_id"], "event_id": row["event_id"],
                       "event_type": row["event_type"], "payload": row["payload"],
                       "occurred_at": row["created_at"].isoformat(), "sequence": row["event_sequence"]},
                      separators=(",", ":"))


def sqs_batches(rows: list[dict[str, Any]]) -> list[list[tuple[dict[str, Any], str]]]:
    """``rows`` with their message bodies (each encoded once), in SendMessageBatch
    calls: at most SQS_BATCH messages and SQS_MAX_BATCH_BYTES of bodies per call
    (SQS refuses a larger request whole, which would leave the same rows unsent
    on every flush)."""
    bodies = [message_body(row) for row in rows]
    runs = batches([len(body.encode("utf-8")) for body in bodies], SQS_BATCH, SQS_MAX_BATCH_BYTES)
    return [[(rows[n], bodies[n]) for n in run] for run in runs]


def _send_batch(sqs: Any, queue_url: str, batch: list[tuple[dict[str, Any], str]],
                log: Any) -> list[dict[str, Any]]:
    """One SendMessageBatch call; returns the rows SQS accepted."""
    rows = [row for row, _ in batch]
    entries = [{"Id": str(n), "MessageBody": body} for n, (_, body) in enumerate(batch)]
    try:
        response = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
    except (ClientError, BotoCoreError) as exc:
        if log is not None:
            log.error("webhook events not sent; the next run retries them",
                      extra={"count": len(rows), "error": type(exc).__name__})
        return []
    for failure in response.get("Failed", []):
        if log is not None:
            row = rows[int(failure["Id"])]
            log.error("webhook event not sent; the next run retries it",
                      extra={"event_id": row["event_id"], "webhook_id": row["webhook_id"],
                             "error": failure.get("Code")})
    return [rows[int(ok["Id"])] for ok in response.get("Successful", [])]
