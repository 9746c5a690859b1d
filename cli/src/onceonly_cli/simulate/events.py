"""AWS-shaped events for the simulation: SQS batches and EventBridge scheduled
events, the shapes `sam local generate-event` prints."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, datetime
from typing import Any

REGION = "us-east-1"
ACCOUNT = "000000000000"


def sqs_record(message_id: str, body: Any, receive_count: int, queue: str = "webhook-events") -> dict[str, Any]:
    text = body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))
    return {
        "messageId": message_id,
        "receiptHandle": f"{message_id}#{receive_count}",
        "body": text,
        "attributes": {
            "ApproximateReceiveCount": str(receive_count),
            "SentTimestamp": str(int(datetime.now(UTC).timestamp() * 1000)),
            "SenderId": ACCOUNT,
            "ApproximateFirstReceiveTimestamp": str(int(datetime.now(UTC).timestamp() * 1000)),
        },
        "messageAttributes": {},
        "md5OfBody": hashlib.md5(text.encode(), usedforsecurity=False).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{queue}",
        "awsRegion": REGION,
    }


def sqs_event(records: list[dict[str, Any]]) -> dict[str, Any]:
    return {"Records": records}


def scheduled_event(rule: str, when: datetime) -> dict[str, Any]:
    """One delivery of a tick: every delivery gets its own id, as EventBridge does."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": ACCOUNT,
        "time": when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": REGION,
        "resources": [f"arn:aws:events:{REGION}:{ACCOUNT}:rule/{rule}"],
        "detail": {},
    }
