"""Fixtures of the webhook suites, loaded with ``pytest_plugins``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import onceonly
from onceonly_app.appdb.migrate import migrate
from onceonly_cli.receiver import WebhookReceiver

from .webhooks import new_id, webhook_env


@pytest.fixture(scope="session")
def webhook_db(postgres_url: str) -> str:
    """The domain database with the migrations applied (tables are shared with
    other tests: every test uses its own ids and counts only its own rows)."""
    migrate(postgres_url)
    return postgres_url


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as rx:
        yield rx


@pytest.fixture
def queue_name() -> str:
    return new_id("webhook-retries")  # a queue of this test's own, so depth counts only its items


@pytest.fixture
def env(webhook_db: str, store: onceonly.Store, store_url: str, queue_name: str) -> dict[str, str]:
    """What the real handlers read, with the test's own retry queue on the ``store`` in use."""
    return webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=queue_name)
