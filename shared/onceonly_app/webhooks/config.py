"""Settings of webhook delivery, read from environment variables so that tests
and `onceonly simulate` can shrink leases and retry schedules."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from onceonly import check_seconds
from onceonly.errors import ConfigError

# Svix-like delays (seconds, each ±10 % jitter) for retry 1, 2, …: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h.
DEFAULT_SCHEDULE = (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)


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
    queue_name: str = "webhook-retries"
    ca_bundle: str | None = None  # extra CA file for TLS verification (tests); None: system CAs
    auto_disable_after: float = 5 * 24 * 3600.0  # a subscription whose attempts all failed this long is disabled

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
    def from_env(cls, env: dict[str, str] | None = None) -> WebhookConfig:
        """Read ``WEBHOOK_*`` variables; unset ones keep their defaults."""
        env = dict(os.environ if env is None else env)
        kwargs: dict[str, object] = {}
        floats = {
            "WEBHOOK_CONNECT_TIMEOUT": "connect_timeout",
            "WEBHOOK_READ_TIMEOUT": "read_timeout",
            "WEBHOOK_ATTEMPT_TIMEOUT": "attempt_timeout",
            "WEBHOOK_ATTEMPT_LEASE": "attempt_lease",
            "WEBHOOK_DEADLINE_MARGIN": "deadline_margin",
            "WEBHOOK_MAX_RETRY_AFTER": "max_retry_after",
            "WEBHOOK_AUTO_DISABLE_AFTER": "auto_disable_after",
        }
        for var, field in floats.items():
            if env.get(var):
                kwargs[field] = _number(var, env[var])
        if env.get("WEBHOOK_RETRY_SCHEDULE"):
            kwargs["retry_schedule"] = tuple(
                _number("WEBHOOK_RETRY_SCHEDULE", part) for part in env["WEBHOOK_RETRY_SCHEDULE"].split(",")
            )
        for var, field in (("WEBHOOK_CLAIM_BATCH", "claim_batch"), ("WEBHOOK_MAX_IN_FLIGHT", "max_in_flight")):
            if env.get(var):
                kwargs[field] = _count(var, env[var])
        if env.get("WEBHOOK_SERIAL_PER_SUBSCRIPTION"):
            kwargs["serial_per_subscription"] = _flag("WEBHOOK_SERIAL_PER_SUBSCRIPTION",
                                                      env["WEBHOOK_SERIAL_PER_SUBSCRIPTION"])
        if env.get("WEBHOOK_ALLOW_HTTP_HOSTS"):
            hosts = (h.strip().lower() for h in env["WEBHOOK_ALLOW_HTTP_HOSTS"].split(","))
            kwargs["allow_http_hosts"] = frozenset(h for h in hosts if h)
        if env.get("WEBHOOK_QUEUE"):
            kwargs["queue_name"] = env["WEBHOOK_QUEUE"]
        if env.get("WEBHOOK_CA_BUNDLE"):
            kwargs["ca_bundle"] = env["WEBHOOK_CA_BUNDLE"]
        return cls(**kwargs)  # type: ignore[arg-type]


def _flag(var: str, text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false", "1", "0"):
        raise ConfigError(f"{var} must be true or false, got {text!r}")
    return value in ("true", "1")


def _count(var: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError as exc:
        raise ConfigError(f"{var} must be a whole number, got {text!r}") from exc


def _number(var: str, text: str) -> float:
    try:
        return float(text.strip())
    except ValueError as exc:
        raise ConfigError(f"{var} must be a number of seconds, got {text!r}") from exc
