"""Fixtures of the webhook suites, loaded with ``pytest_plugins``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from onceonly_app.appdb.migrate import migrate
from onceonly_cli.receiver import WebhookReceiver


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
