"""The notifications job: send the e-mail outbox through SES.

Each row is claimed (SKIP LOCKED, with a claim lease and token) and sent at most
once per claim; the outcome is recorded only under that claim's token. Failures
go back to pending with backoff; after ``max_attempts`` claims a row ends in
`failed` and is kept. A sender that dies after SES accepted a message but
before recording it leaves the row to be claimed again when the claim runs out:
delivery across claims is at least once (SES takes no idempotency key). When
the last allowed claim runs out the row is given up (`failed`), but its holder
may be only slow: it can still record its outcome, since no one else can have
claimed the row since.

An overdue e-mail is re-checked just before it is sent: if its invoice is no
longer overdue (paid or voided meanwhile) it is cancelled, not sent. A send
starts only while the invocation has time for a whole SES call (aws.py); the
claims a run will not get to go back to pending at once."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from onceonly import Tick
from onceonly_app.sql_queries import load_queries

from ..runtime.aws import CALL_SECONDS
from ..runtime.budget import Budget
from .config import NotificationSettings
from .ses import SendError

SQL = load_queries(Path(__file__).with_suffix(".sql"))
SEND_SECONDS = CALL_SECONDS + 2.0  # one SES call and the recording of its outcome
GIVEN_UP = "claim expired on the last attempt"  # last_error of a give-up; its holder may still record


class Sender(Protocol):
    def send(self, recipient: str, subject: str, body_text: str) -> str: ...


@dataclass
class SendResult:
    sent: int = 0
    retrying: int = 0
    failed: int = 0
    claims_lost: int = 0  # outcomes refused because the claim was re-granted
    abandoned: int = 0  # claim ran out on their last attempt, now failed (unless its holder still records)
    cancelled: int = 0  # overdue e-mails whose invoice was paid or voided before sending
    released: int = 0  # claimed, not sent: the run reached its deadline

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def retry_delay(attempt: int, schedule: tuple[float, ...]) -> float:
    """Seconds before the next claim after failed attempt ``attempt`` (1-based),
    with ±10% jitter so that a burst of failures does not retry in lockstep."""
    base = schedule[min(attempt, len(schedule)) - 1]
    return base * random.uniform(0.9, 1.1)


def run(pool: ConnectionPool, tick: Tick, sender: Sender, settings: NotificationSettings, *,
        tenant: str | None = None, budget: Budget | None = None, log: Any = None) -> SendResult:
    """Send due notifications until none is left or the invocation's time runs low."""
    budget = budget or Budget.unlimited()
    result = SendResult()
    scope = {"tenant": tenant, "max_attempts": settings.max_attempts}
    with pool.connection() as conn, conn.transaction():
        result.abandoned = len(conn.execute(SQL["give_up_abandoned"], {**scope, "given_up": GIVEN_UP}).fetchall())
    while budget.allows(SEND_SECONDS):
        with pool.connection() as conn, conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            claims = cur.execute(SQL["claim"], {**scope, "limit": settings.batch_size,
                                                "claim_ttl": settings.claim_ttl}).fetchall()
        if not claims:
            break
        for n, claim in enumerate(claims):
            if not budget.allows(SEND_SECONDS):
                _release(pool, claims[n:], result)
                return result
            if _moot(pool, claim):
                result.cancelled += 1
                continue
            _send_one(pool, sender, settings, claim, result, log)
        tick.renew()
    return result


def _moot(pool: ConnectionPool, claim: dict[str, Any]) -> bool:
    with pool.connection() as conn, conn.transaction():
        return conn.execute(SQL["cancel_if_moot"], {"id": claim["id"], "token": claim["claim_token"]}
                            ).fetchone() is not None


def _release(pool: ConnectionPool, claims: list[dict[str, Any]], result: SendResult) -> None:
    with pool.connection() as conn, conn.transaction():
        conn.execute(SQL["release"], {"ids": [c["id"] for c in claims], "tokens": [c["claim_token"] for c in claims]})
    result.released += len(claims)


def _send_one(pool: ConnectionPool, sender: Sender, settings: NotificationSettings,
              claim: dict[str, Any], result: SendResult, log: Any) -> None:
    ids = {"id": claim["id"], "token": claim["claim_token"]}
    outcome_ids = {**ids, "given_up": GIVEN_UP}
    try:
        message_id = sender.send(claim["recipient"], claim["subject"], claim["body_text"])
    except SendError as exc:
        error = str(exc)[:500]
        delay = retry_delay(claim["attempts"], settings.retry_schedule)
        with pool.connection() as conn, conn.transaction():
            conn.execute(SQL["record_attempt"], {**ids, "outcome": "failed", "error": error})
            row = conn.execute(SQL["mark_failed"], {**outcome_ids, "error": error, "retry_in": delay,
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
        row = conn.execute(SQL["mark_sent"], {**outcome_ids, "message_id": message_id}).fetchone()
    if row is None:
        result.claims_lost += 1
        if log is not None:
            log.warning("notification sent but its claim was re-granted meanwhile",
                        extra={"notification_key": claim["notification_key"], "token": claim["claim_token"]})
    else:
        result.sent += 1
