"""WEBHOOK_* settings: parsed, validated, with clear errors."""

from __future__ import annotations

import pytest

from onceonly.errors import ConfigError
from onceonly_app.webhooks.config import DEFAULT_SCHEDULE, WebhookConfig


def test_defaults() -> None:
    config = WebhookConfig.from_env({})
    assert config.retry_schedule == DEFAULT_SCHEDULE and config.max_attempts == 8
    assert config.allow_http_hosts == frozenset()
    assert config.queue_name == "webhook-retries"


def test_reads_the_environment() -> None:
    config = WebhookConfig.from_env({
        "WEBHOOK_RETRY_SCHEDULE_SECONDS": "0.5, 1,2",
        "WEBHOOK_ALLOW_HTTP_HOSTS": "127.0.0.1, LocalHost,",
        "WEBHOOK_CONNECT_TIMEOUT_SECONDS": "1",
        "WEBHOOK_READ_TIMEOUT_SECONDS": "2",
        "WEBHOOK_ATTEMPT_LEASE_SECONDS": "10",
        "WEBHOOK_CLAIM_BATCH": "3",
        "WEBHOOK_QUEUE": "q-test",
    })
    assert config.retry_schedule == (0.5, 1.0, 2.0) and config.max_attempts == 4
    assert config.allow_http_hosts == frozenset({"127.0.0.1", "localhost"})
    assert (config.attempt_budget, config.claim_batch, config.queue_name) == (3.0, 3, "q-test")


def test_the_attempt_timeout_is_one_bound_for_the_whole_attempt() -> None:
    config = WebhookConfig.from_env({"WEBHOOK_ATTEMPT_TIMEOUT_SECONDS": "4", "WEBHOOK_ATTEMPT_LEASE_SECONDS": "20"})
    assert config.attempt_budget == 4.0  # not connect + read (13 s), which 4 serial claims could not fit in 20 s
    with pytest.raises(ConfigError, match=r"attempt_lease .* must exceed ceil\(claim_batch / max_in_flight\) x "
                                          "attempt timeout = 24"):
        WebhookConfig.from_env({"WEBHOOK_ATTEMPT_TIMEOUT_SECONDS": "6", "WEBHOOK_ATTEMPT_LEASE_SECONDS": "20",
                                "WEBHOOK_MAX_IN_FLIGHT": "1"})


def test_claims_attempted_concurrently_need_a_lease_of_their_rounds_only() -> None:
    # 4 claims, 2 in flight: two rounds of 6 s fit in 20 s; one at a time (four rounds) do not.
    config = WebhookConfig.from_env({"WEBHOOK_ATTEMPT_TIMEOUT_SECONDS": "6", "WEBHOOK_ATTEMPT_LEASE_SECONDS": "20",
                                     "WEBHOOK_MAX_IN_FLIGHT": "2"})
    assert config.max_in_flight == 2
    assert (WebhookConfig().max_in_flight, WebhookConfig().serial_per_subscription) == (10, False)
    assert WebhookConfig.from_env({"WEBHOOK_SERIAL_PER_SUBSCRIPTION": "True"}).serial_per_subscription
    with pytest.raises(ConfigError, match="= 24"):
        WebhookConfig.from_env({"WEBHOOK_ATTEMPT_TIMEOUT_SECONDS": "6", "WEBHOOK_ATTEMPT_LEASE_SECONDS": "20",
                                "WEBHOOK_MAX_IN_FLIGHT": "1"})
    with pytest.raises(ConfigError, match="WEBHOOK_ATTEMPT_TIMEOUT_SECONDS must be a positive"):
        WebhookConfig.from_env({"WEBHOOK_ATTEMPT_TIMEOUT_SECONDS": "-1"})


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"WEBHOOK_RETRY_SCHEDULE_SECONDS": "1,x"}, "WEBHOOK_RETRY_SCHEDULE_SECONDS must be a number"),
        ({"WEBHOOK_RETRY_SCHEDULE_SECONDS": "1,-1"}, "WEBHOOK_RETRY_SCHEDULE_SECONDS must be a positive"),
        ({"WEBHOOK_READ_TIMEOUT_SECONDS": "0"}, "WEBHOOK_READ_TIMEOUT_SECONDS must be a positive"),
        ({"WEBHOOK_CLAIM_BATCH": "0"}, "WEBHOOK_CLAIM_BATCH must be >= 1"),
        ({"WEBHOOK_MAX_IN_FLIGHT": "0"}, "WEBHOOK_MAX_IN_FLIGHT must be >= 1"),
        ({"WEBHOOK_CLAIM_BATCH": "-2"}, "WEBHOOK_CLAIM_BATCH must be >= 1"),
        ({"WEBHOOK_MAX_IN_FLIGHT": "many"}, "WEBHOOK_MAX_IN_FLIGHT must be a whole number"),
        ({"WEBHOOK_SERIAL_PER_SUBSCRIPTION": "yes please"}, "WEBHOOK_SERIAL_PER_SUBSCRIPTION must be true or false"),
        # 4 claims x (3 + 10) s one at a time cannot finish inside a 30 s lease
        ({"WEBHOOK_ATTEMPT_LEASE_SECONDS": "30", "WEBHOOK_MAX_IN_FLIGHT": "1"}, "attempt_lease .* must exceed"),
        # nor can one round of 13 s inside a 13 s lease
        ({"WEBHOOK_ATTEMPT_LEASE_SECONDS": "13"}, "attempt_lease .* must exceed"),
    ],
)
def test_bad_settings_are_config_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        WebhookConfig.from_env(env)


def test_a_setting_left_under_its_old_name_is_refused_not_ignored() -> None:
    """An override an operator set before the durations took _SECONDS would
    otherwise vanish silently after the upgrade."""
    with pytest.raises(ConfigError, match="WEBHOOK_ATTEMPT_LEASE is now WEBHOOK_ATTEMPT_LEASE_SECONDS"):
        WebhookConfig.from_env({"WEBHOOK_ATTEMPT_LEASE": "120"})
    assert WebhookConfig.from_env({"WEBHOOK_ATTEMPT_LEASE_SECONDS": "120"}).attempt_lease == 120.0
    assert WebhookConfig.from_env({"WEBHOOK_ATTEMPT_LEASE": ""}).attempt_lease == WebhookConfig().attempt_lease
