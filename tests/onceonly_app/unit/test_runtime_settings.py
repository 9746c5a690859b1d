"""The one settings reader: one meaning per kind of value, whichever setting
class reads it, and the variable's name in every error."""

from __future__ import annotations

import re

import pytest

from onceonly.errors import ConfigError
from onceonly_app.billing.config import JobSettings, NotificationSettings
from onceonly_app.runtime import settings
from onceonly_app.webhooks.config import WebhookConfig
from tests.support import REPO_ROOT


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "many"])
def test_a_count_below_one_or_not_whole_is_refused_by_every_reader(value: str) -> None:
    with pytest.raises(ConfigError, match="NOTIFICATION_BATCH_SIZE"):
        NotificationSettings.from_env({"SES_FROM_ADDRESS": "a@example.com", "NOTIFICATION_BATCH_SIZE": value})
    with pytest.raises(ConfigError, match="WEBHOOK_CLAIM_BATCH"):
        WebhookConfig.from_env({"WEBHOOK_CLAIM_BATCH": value})


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf"])
def test_seconds_are_positive_and_finite_in_every_reader(value: str) -> None:
    with pytest.raises(ConfigError, match="TICK_LEASE_SECONDS"):
        JobSettings.from_env("x", {"TICK_LEASE_SECONDS": value})
    with pytest.raises(ConfigError, match="WEBHOOK_ATTEMPT_LEASE_SECONDS"):
        WebhookConfig.from_env({"WEBHOOK_ATTEMPT_LEASE_SECONDS": value})


def test_unset_and_empty_keep_the_default_and_text_is_stripped() -> None:
    env = {"A": "", "B": "  b  ", "N": " x, ,y ,"}
    assert settings.text(env, "A", "d") == "d" and settings.text(env, "B") == "b"
    assert settings.seconds(env, "A", 2.5) == 2.5 and settings.count({}, "C", 3) == 3
    assert settings.flag({"F": "TRUE"}, "F", False) and not settings.flag({"F": "0"}, "F", True)
    assert settings.names(env, "N") == ("x", "y") and settings.names({}, "N") == ()
    assert settings.seconds_list({"S": "1, 2.5"}, "S", ()) == (1.0, 2.5)
    with pytest.raises(ConfigError, match="set R"):
        settings.required(env, "R")


def test_the_billing_scope_is_read_from_the_environment_and_unset_by_default() -> None:
    deployed = JobSettings.from_env("overdue-invoices", {})
    assert (deployed.job, deployed.tenant) == ("overdue-invoices", None)
    scoped = JobSettings.from_env("overdue-invoices", {"BILLING_JOB_NAME": "job-1", "BILLING_TENANT": "t1"})
    assert (scoped.job, scoped.tenant) == ("job-1", "t1")


def test_every_setting_the_app_reads_is_in_the_one_table() -> None:
    """docs/configuration.md lists every variable read through the reader."""
    app = REPO_ROOT / "app" / "src" / "onceonly_app"
    read: set[str] = set()
    for path in app.rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        read |= set(re.findall(r'\(\s*(?:env|os\.environ),\s*"([A-Z][A-Z0-9_]+)"', source))
        for call in re.findall(r"_read\(([^)]*)\)", source):
            read |= set(re.findall(r'"([A-Z][A-Z0-9_]+)"', call))
    assert {"TICK_LEASE_SECONDS", "SES_FROM_ADDRESS", "WEBHOOK_ATTEMPT_LEASE_SECONDS", "DATABASE_URL_SECRET",
            "ONCEONLY_STORE_URL", "BILLING_TENANT"} <= read
    table = (REPO_ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert sorted(name for name in read if f"| `{name}` |" not in table) == []


def test_every_duration_ends_in_seconds() -> None:
    app = REPO_ROOT / "app" / "src" / "onceonly_app"
    for path in app.rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        for name in re.findall(r'seconds(?:_list)?\(\s*env,\s*"([A-Z_]+)"', source):
            assert name.endswith("_SECONDS"), (path.name, name)
