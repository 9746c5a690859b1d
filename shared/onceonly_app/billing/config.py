"""Settings of the billing jobs, read from environment variables (the template
sets them; each one is documented in docs/scheduled-jobs.md). Only what an
operator tunes lives here: the job names are fixed by the code, and every run
works on every tenant."""

from __future__ import annotations

import os
from dataclasses import dataclass

from onceonly import check_seconds
from onceonly.errors import ConfigError
from onceonly.scheduled import DEFAULT_KEEP, DEFAULT_TTL, HEARTBEATS_PER_TTL

from .assets import AcceptedAssets

PAYMENT_WATCHER_JOB = "payment-watcher"  # also the poller name of its cursor, which the overdue job reads


def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from None
    return check_seconds(value, name)


def _count(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"{name} must be a positive integer, got {raw!r}")
    return int(raw)


def _required(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise ConfigError(f"set {name}")
    return value


def _accepted_assets(name: str) -> AcceptedAssets:
    raw = _required(name)
    try:
        return AcceptedAssets.parse(raw)
    except ConfigError as exc:
        raise ConfigError(f"{name}: {exc}") from None


@dataclass(frozen=True)
class JobSettings:
    """What every scheduled job reads: its name (the tick lock's prefix), the
    tick lease, how often its heartbeat renews it, and how long a completed
    tick is remembered."""

    job: str
    tick_ttl: float
    tick_heartbeat: float
    tick_keep: float

    @classmethod
    def from_env(cls, job: str) -> JobSettings:
        ttl = _seconds("TICK_LEASE_SECONDS", DEFAULT_TTL)
        # onceonly.scheduled checks it against the ttl when the handler is built
        heartbeat = _seconds("TICK_HEARTBEAT_SECONDS", ttl / HEARTBEATS_PER_TTL)
        return cls(job=job, tick_ttl=ttl, tick_heartbeat=heartbeat,
                   tick_keep=_seconds("TICK_KEEP_SECONDS", DEFAULT_KEEP))


@dataclass(frozen=True)
class NotificationSettings:
    sender: str  # the SES From address (its identity is what IAM allows)
    claim_ttl: float  # how long one claim may take before another run may take the row
    max_attempts: int  # claims per notification before it ends in `failed`
    batch_size: int
    retry_schedule: tuple[float, ...]  # seconds before retry 1, 2, … (the last one repeats)

    @classmethod
    def from_env(cls) -> NotificationSettings:
        return cls(
            sender=_required("SES_FROM_ADDRESS"),
            claim_ttl=_seconds("NOTIFICATION_CLAIM_SECONDS", 120.0),
            max_attempts=_count("NOTIFICATION_MAX_ATTEMPTS", 5),
            batch_size=_count("NOTIFICATION_BATCH_SIZE", 25),
            retry_schedule=(60.0, 300.0, 1800.0, 7200.0),
        )


@dataclass(frozen=True)
class PaymentWatcherSettings:
    api_url: str  # Horizon-style base URL: GET {api_url}/payments
    queue_url: str  # the webhook dispatcher's SQS queue
    accepted_assets: AcceptedAssets  # which assets (code and issuer) pay which currency
    poller_ttl: float  # the job-wide poller lease
    page_limit: int
    max_pages: int  # per run; the next tick continues from the stored cursor

    @classmethod
    def from_env(cls) -> PaymentWatcherSettings:
        return cls(
            api_url=_required("PAYMENTS_API_URL").rstrip("/"),
            queue_url=_required("WEBHOOK_QUEUE_URL"),
            accepted_assets=_accepted_assets("PAYMENTS_ACCEPTED_ASSETS"),
            poller_ttl=_seconds("POLLER_LEASE_SECONDS", 120.0),
            page_limit=_count("PAYMENTS_PAGE_LIMIT", 200),
            max_pages=_count("PAYMENTS_MAX_PAGES", 50),
        )
