"""boto3 clients for the billing jobs' AWS calls (SES, SQS), with bounded time.

boto3's defaults (60 s connect and read timeouts, several retries) let one call
outlive the invocation. These clients give a call at most ``CALL_SECONDS``, and
the jobs start one only while that much of the invocation is left (onceonly_app/runtime/budget.py)."""

from __future__ import annotations

from typing import Any

CONNECT_SECONDS = 2.0
READ_SECONDS = 5.0
ATTEMPTS = 2  # the call and one retry (botocore "standard" mode, backoff below 1 s)


def call_seconds(connect: float, read: float, attempts: int) -> float:
    """The longest one call of a client built with these bounds can take."""
    return attempts * (connect + read) + 1.0


CALL_SECONDS = call_seconds(CONNECT_SECONDS, READ_SECONDS, ATTEMPTS)


def bounded_client(service: str, *, connect: float = CONNECT_SECONDS, read: float = READ_SECONDS,
                   attempts: int = ATTEMPTS, **kwargs: Any) -> Any:
    """``boto3.client(service)`` with bounded timeouts and retries."""
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=connect, read_timeout=read,
                    retries={"mode": "standard", "total_max_attempts": attempts})
    return boto3.client(service, config=config, **kwargs)  # type: ignore[call-overload]

