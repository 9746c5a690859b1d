"""Billing settings from the environment, and the notification backoff."""

from __future__ import annotations

import pytest

import onceonly
from onceonly_app.billing.config import JobSettings, NotificationSettings, PaymentWatcherSettings
from onceonly_app.billing.notifications import retry_delay
from onceonly_app.billing.testhooks import PAUSE_ENV, pause_point


def test_job_settings_defaults_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("JOB_NAME", "TICK_LEASE_SECONDS", "TICK_KEEP_SECONDS", "BILLING_TENANT_SCOPE"):
        monkeypatch.delenv(name, raising=False)
    assert JobSettings.from_env("overdue-invoices") == JobSettings("overdue-invoices", 300.0, 604800.0, None)
    monkeypatch.setenv("JOB_NAME", "j")
    monkeypatch.setenv("TICK_LEASE_SECONDS", "2.5")
    monkeypatch.setenv("BILLING_TENANT_SCOPE", "t1")
    assert JobSettings.from_env("x") == JobSettings("j", 2.5, 604800.0, "t1")


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan"])
def test_bad_seconds_are_config_errors(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("TICK_LEASE_SECONDS", value)
    with pytest.raises(onceonly.ConfigError, match="TICK_LEASE_SECONDS"):
        JobSettings.from_env("x")


def test_required_settings_name_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SES_FROM_ADDRESS", raising=False)
    with pytest.raises(onceonly.ConfigError, match="SES_FROM_ADDRESS"):
        NotificationSettings.from_env()
    monkeypatch.setenv("PAYMENTS_API_URL", "http://127.0.0.1:1/")
    monkeypatch.delenv("WEBHOOK_QUEUE_URL", raising=False)
    with pytest.raises(onceonly.ConfigError, match="WEBHOOK_QUEUE_URL"):
        PaymentWatcherSettings.from_env()


def test_retry_delay_follows_the_schedule_with_jitter() -> None:
    schedule = (60.0, 300.0)
    for attempt, base in ((1, 60.0), (2, 300.0), (7, 300.0)):
        delays = [retry_delay(attempt, schedule) for _ in range(50)]
        assert all(0.9 * base <= d <= 1.1 * base for d in delays)
        assert len(set(delays)) > 1


def test_pause_point_is_inert_unless_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PAUSE_ENV, "another.point")
    pause_point("overdue.before_transitions")  # would stop this process if it matched
    monkeypatch.delenv(PAUSE_ENV)
    pause_point("overdue.before_transitions")
