"""The notifications job: send the e-mail outbox through SES.

Each row is claimed (SKIP LOCKED, with a claim lease and token) and sent at most
once per claim; the outcome is recorded only under that claim's token. Failures
go back to pending with backoff; after ``max_attempts`` claims a row ends in
`failed` and is kept. A sender that dies after SES accepted a message but
before recording it leaves the row to be claimed again when the claim runs out:
delivery across claims is at least once (SES takes no idempotency key)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from onceonly import Tick
from onceonly.stores.sqlfile import load_queries

from .config import NotificationSettings
from .ses import SendError

SQL = load_queries(Path(__file__).with_suffix(".sql"))
DEADLINE_MARGIN = 10.0  # seconds of invocation time kept for recording outcomes


class Sender(Protocol):
    def send(self, recipient: str, subject: str, body_text: str) -> str: ...


@dataclass
class SendResult:
    sent: int = 0
    retrying: int = 0
    failed: int = 0
    claims_lost: int = 0  # outcomes refused because the claim was re-granted
    abandoned: int = 0  # crashed on their last attempt, now failed

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def retry_delay(attempt: int, schedule: tuple[float, ...]) -> float:
    """Seconds before the next claim after failed attempt ``attempt`` (1-based),
    with ±10% jitter so that a burst of failures does not retry in lockstep."""
    base = schedule[min(attempt, len(schedule)) - 1]
    return base * random.uniform(0.9, 1.1)


def run(pool: ConnectionPool, tick: Tick, sender: Sender, settings: NotificationSettings, *,
        tenant: str | None = None, seconds_left: Callable[[], float] = lambda: float("inf"),
        log: Any = None) -> SendResult:
    """Send due notifications until none is left or the invocation's time runs low."""
    result = SendResult()
    scope = {"tenant": tenant, "max_attempts": settings.max_attempts}
    with pool.connection() as conn, conn.transaction():
        result.abandoned = len(conn.execute(SQL["give_up_abandoned"], scope).fetchall())
    while seconds_left() > DEADLINE_MARGIN:
        with pool.connection() as conn, conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            claims = cur.execute(SQL["claim"], {**scope, "limit": settings.batch_size,
                                                "claim_ttl": settings.claim_ttl}).fetchall()
        if not claims:
            break
        for claim in claims:
            _send_one(pool, sender, settings, claim, result, log)
        tick.renew()
    return result


def _send_one(pool: ConnectionPool, sender: Sender, settings: NotificationSettings,
              claim: dict[str, Any], result: SendResult, log: Any) -> None:
    ids = {"id": claim["id"], "token": claim["claim_token"]}
    try:
        message_id = sender.send(claim["recipient"], claim["subject"], claim["body_text"])
    except SendError as exc:
        error = str(exc)[:500]
        delay = retry_delay(claim["attempts"], settings.retry_schedule)
        with pool.connection() as conn, conn.transaction():
            conn.execute(SQL["record_attempt"], {**ids, "outcome": "failed", "error": error})
            row = conn.execute(SQL["mark_failed"], {**ids, "error": error, "retry_in": delay,
                                                    "max_attempts": settings.max_attempts}).fetchone()
        if row is None:
            result.claims_lost += 1
        elif row[0] == "failed":
            result.failed += 1
        else:
            result.retrying += 1
        if log is not None:
            log.warning("notification send failed", extra={"notification_key": claim["notification_key"],
                                                           "attempt": claim["attempts"], "error_code": exc.code})
        return
    with pool.connection() as conn, conn.transaction():
        conn.execute(SQL["record_attempt"], {**ids, "outcome": "sent", "error": None})
        row = conn.execute(SQL["mark_sent"], {**ids, "message_id": message_id}).fetchone()
    if row is None:
        result.claims_lost += 1
        if log is not None:
            log.warning("notification sent but its claim was re-granted meanwhile",
                        extra={"notification_key": claim["notification_key"], "token": claim["claim_token"]})
    else:
        result.sent += 1
