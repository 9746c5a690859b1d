"""Billing settings from the environment, and the notification backoff."""

from __future__ import annotations

import pytest

import onceonly
from onceonly_app.billing.config import JobSettings, NotificationSettings, PaymentWatcherSettings
from onceonly_app.billing.notifications import retry_delay
from tests.support import REPO_ROOT


def test_job_settings_defaults_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TICK_LEASE_SECONDS", "TICK_HEARTBEAT_SECONDS", "TICK_KEEP_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    # a short lease, renewed three times per ttl: free again long before Lambda's retry (~60 s)
    assert JobSettings.from_env("overdue-invoices") == JobSettings("overdue-invoices", 30.0, 10.0, 604800.0)
    monkeypatch.setenv("TICK_LEASE_SECONDS", "3")
    assert JobSettings.from_env("x") == JobSettings("x", 3.0, 1.0, 604800.0)
    monkeypatch.setenv("TICK_HEARTBEAT_SECONDS", "0.5")
    monkeypatch.setenv("TICK_KEEP_SECONDS", "60")
    assert JobSettings.from_env("x") == JobSettings("x", 3.0, 0.5, 60.0)


def test_the_scope_knobs_are_never_set_by_the_template(monkeypatch: pytest.MonkeyPatch) -> None:
    # They change lock keys and the tenants a job works on: for runs that share a
    # database and store (the tests), never for a deployed stack.
    for name in ("BILLING_JOB_NAME", "BILLING_TENANT"):
        monkeypatch.delenv(name, raising=False)
        assert name not in (REPO_ROOT / "template.yaml").read_text(encoding="utf-8")
    settings = JobSettings.from_env("overdue-invoices")
    assert (settings.job, settings.tenant) == ("overdue-invoices", None)


@pytest.mark.parametrize("name", ["TICK_LEASE_SECONDS", "TICK_HEARTBEAT_SECONDS"])
@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan"])
def test_bad_seconds_are_config_errors(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(onceonly.ConfigError, match=name):
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
