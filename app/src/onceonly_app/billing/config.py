"""Settings of the billing jobs, read from environment variables through the
one reader (runtime/settings.py; every variable is in docs/configuration.md).
The template sets what an operator tunes. Deployed, each job runs under its own
name on every tenant; BILLING_JOB_NAME and BILLING_TENANT narrow that for a
database and store shared with other runs (the tests), and the template never
sets them."""

from __future__ import annotations

import os
from dataclasses import dataclass

from onceonly.errors import ConfigError
from onceonly.scheduled import DEFAULT_KEEP, DEFAULT_TTL, HEARTBEATS_PER_TTL
from onceonly_app.runtime import settings
from onceonly_app.runtime.settings import Env

from .assets import AcceptedAssets

PAYMENT_WATCHER_JOB = "payment-watcher"  # also the poller name of its cursor, which the overdue job reads


def _accepted_assets(env: Env, name: str) -> AcceptedAssets:
    raw = settings.required(env, name)
    try:
        return AcceptedAssets.parse(raw)
    except ConfigError as exc:
        raise ConfigError(f"{name}: {exc}") from None


@dataclass(frozen=True)
class JobSettings:
    """What every scheduled job reads: its name (the tick lock's prefix), the
    tick lease, how often its heartbeat renews it, how long a completed tick is
    remembered, and the one tenant it works on (None: every tenant)."""

    job: str
    tick_ttl: float
    tick_heartbeat: float
    tick_keep: float
    tenant: str | None = None

    @classmethod
    def from_env(cls, job: str, env: Env = os.environ) -> JobSettings:
        """``job``'s settings (``job``: its own name, unless BILLING_JOB_NAME is set)."""
        ttl = settings.seconds(env, "TICK_LEASE_SECONDS", DEFAULT_TTL)
        # onceonly.scheduled checks it against the ttl when the handler is built
        heartbeat = settings.seconds(env, "TICK_HEARTBEAT_SECONDS", ttl / HEARTBEATS_PER_TTL)
        return cls(job=settings.text(env, "BILLING_JOB_NAME") or job, tick_ttl=ttl, tick_heartbeat=heartbeat,
                   tick_keep=settings.seconds(env, "TICK_KEEP_SECONDS", DEFAULT_KEEP),
                   tenant=settings.text(env, "BILLING_TENANT"))


@dataclass(frozen=True)
class NotificationSettings:
    sender: str  # the SES From address (its identity is what IAM allows)
    claim_ttl: float  # how long one claim may take before another run may take the row
    max_attempts: int  # claims per notification before it ends in `failed`
    batch_size: int
    retry_schedule: tuple[float, ...]  # seconds before retry 1, 2, … (the last one repeats)

    @classmethod
    def from_env(cls, env: Env = os.environ) -> NotificationSettings:
        return cls(
            sender=settings.required(env, "SES_FROM_ADDRESS"),
            claim_ttl=settings.seconds(env, "NOTIFICATION_CLAIM_SECONDS", 120.0),
            max_attempts=settings.count(env, "NOTIFICATION_MAX_ATTEMPTS", 5),
            batch_size=settings.count(env, "NOTIFICATION_BATCH_SIZE", 25),
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
    def from_env(cls, env: Env = os.environ) -> PaymentWatcherSettings:
        return cls(
            api_url=settings.required(env, "PAYMENTS_API_URL").rstrip("/"),
            queue_url=settings.required(env, "WEBHOOK_QUEUE_URL"),
            accepted_assets=_accepted_assets(env, "PAYMENTS_ACCEPTED_ASSETS"),
            poller_ttl=settings.seconds(env, "POLLER_LEASE_SECONDS", 120.0),
            page_limit=settings.count(env, "PAYMENTS_PAGE_LIMIT", 200),
            max_pages=settings.count(env, "PAYMENTS_MAX_PAGES", 50),
        )
