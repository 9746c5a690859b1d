"""Settings of webhook delivery, read from environment variables through the
one reader (runtime/settings.py) so that tests and `onceonly simulate` can
shrink leases and retry schedules."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from onceonly import check_seconds
from onceonly.errors import ConfigError
from onceonly_app.runtime import settings
from onceonly_app.runtime.settings import Env

DEFAULT_QUEUE = "webhook-retries"  # the retries' due queue; the CLI's default too
# Svix-like delays (seconds, each ±10 % jitter) for retry 1, 2, …: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h.
DEFAULT_SCHEDULE = (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)


# Durations that took the _SECONDS suffix: a value still set under the old
# name is refused, not ignored.
RENAMED = {f"WEBHOOK_{name}": f"WEBHOOK_{name}_SECONDS" for name in (
    "CONNECT_TIMEOUT", "READ_TIMEOUT", "ATTEMPT_TIMEOUT", "ATTEMPT_LEASE", "DEADLINE_MARGIN", "MAX_RETRY_AFTER",
    "AUTO_DISABLE_AFTER", "RETRY_SCHEDULE")}


@dataclass(frozen=True)
class WebhookConfig:
    retry_schedule: tuple[float, ...] = DEFAULT_SCHEDULE  # one delay per retry; attempts = 1 + len
    connect_timeout: float = 3.0  # cap on the TCP connect
    read_timeout: float = 10.0  # cap on any single wait for bytes
    attempt_timeout: float | None = None  # ONE deadline for DNS + connect + TLS + headers + body;
    # None: connect_timeout + read_timeout
    attempt_lease: float = 60.0  # how long one claim (or the dispatcher's first attempt) may take
    claim_batch: int = 4  # deliveries claimed per q.claim by the retry worker
    max_in_flight: int = 10  # attempts of one batch (SQS or claimed) in flight at once
    serial_per_subscription: bool = False  # one subscription's records of an SQS batch one after another
    deadline_margin: float = 5.0  # seconds of invocation time kept free for recording and acking
    max_retry_after: float = 36000.0  # a Retry-After above this is capped
    allow_http_hosts: frozenset[str] = frozenset()  # hosts allowed plain http and private addresses
    queue_name: str = DEFAULT_QUEUE  # the due queue of retries in the coordination store
    ca_bundle: str | None = None  # extra CA file for TLS verification (tests); None: system CAs
    auto_disable_after: float = 5 * 24 * 3600.0  # a subscription whose attempts all failed this long is disabled
    queue_url: str | None = None  # the dispatcher's SQS queue, to back off what a store outage stopped; None: local

    def __post_init__(self) -> None:
        if not self.retry_schedule or any(not math.isfinite(s) or s <= 0 for s in self.retry_schedule):
            raise ConfigError(f"retry schedule needs positive seconds, got {self.retry_schedule!r}")
        for name in ("connect_timeout", "read_timeout", "attempt_lease", "deadline_margin", "max_retry_after",
                     "auto_disable_after"):
            check_seconds(getattr(self, name), name)
        if self.attempt_timeout is not None:
            check_seconds(self.attempt_timeout, "attempt_timeout")
        for name in ("claim_batch", "max_in_flight"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        # A claimed batch is attempted max_in_flight at a time; the last round
        # must still be inside its lease, or another worker reclaims it while we POST.
        rounds = math.ceil(self.claim_batch / self.max_in_flight)
        if rounds * self.attempt_budget >= self.attempt_lease:
            raise ConfigError(
                f"attempt_lease ({self.attempt_lease}s) must exceed ceil(claim_batch / max_in_flight) x attempt "
                f"timeout = {rounds * self.attempt_budget}s"
            )

    @property
    def max_attempts(self) -> int:
        return 1 + len(self.retry_schedule)

    @property
    def attempt_budget(self) -> float:
        """The longest one attempt's request can take, DNS lookup included: the
        attempt timeout (by default connect plus read timeout)."""
        return self.attempt_timeout or self.connect_timeout + self.read_timeout

    @classmethod
    def from_env(cls, env: Env = os.environ) -> WebhookConfig:
        """Read the ``WEBHOOK_*`` variables (docs/configuration.md); unset ones keep their defaults."""
        settings.refuse_renamed(env, RENAMED)
        default = cls()
        return cls(
            retry_schedule=settings.seconds_list(env, "WEBHOOK_RETRY_SCHEDULE_SECONDS", default.retry_schedule),
            connect_timeout=settings.seconds(env, "WEBHOOK_CONNECT_TIMEOUT_SECONDS", default.connect_timeout),
            read_timeout=settings.seconds(env, "WEBHOOK_READ_TIMEOUT_SECONDS", default.read_timeout),
            attempt_timeout=settings.optional_seconds(env, "WEBHOOK_ATTEMPT_TIMEOUT_SECONDS"),
            attempt_lease=settings.seconds(env, "WEBHOOK_ATTEMPT_LEASE_SECONDS", default.attempt_lease),
            claim_batch=settings.count(env, "WEBHOOK_CLAIM_BATCH", default.claim_batch),
            max_in_flight=settings.count(env, "WEBHOOK_MAX_IN_FLIGHT", default.max_in_flight),
            serial_per_subscription=settings.flag(env, "WEBHOOK_SERIAL_PER_SUBSCRIPTION",
                                                  default.serial_per_subscription),
            deadline_margin=settings.seconds(env, "WEBHOOK_DEADLINE_MARGIN_SECONDS", default.deadline_margin),
            max_retry_after=settings.seconds(env, "WEBHOOK_MAX_RETRY_AFTER_SECONDS", default.max_retry_after),
            allow_http_hosts=frozenset(h.lower() for h in settings.names(env, "WEBHOOK_ALLOW_HTTP_HOSTS")),
            queue_name=settings.text(env, "WEBHOOK_QUEUE", default.queue_name) or default.queue_name,
            ca_bundle=settings.text(env, "WEBHOOK_CA_BUNDLE"),
            auto_disable_after=settings.seconds(env, "WEBHOOK_AUTO_DISABLE_AFTER_SECONDS",
                                                default.auto_disable_after),
            queue_url=settings.text(env, "WEBHOOK_QUEUE_URL"),
        )
