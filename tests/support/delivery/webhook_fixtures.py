"""Fixtures of the webhook suites, loaded with ``pytest_plugins``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

import onceonly
from onceonly_app.db.migrate import MIGRATIONS_DIR, migrate
from onceonly_cli.testing.receiver import WebhookReceiver
from tests.support.delivery.webhooks import new_id, webhook_env
from tests.support.servers.scratch import scratch_database


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


@contextmanager
def migrated_before(server_url: str, migration: str) -> Iterator[str]:
    """A fresh database with every migration whose name sorts before ``migration``
    applied (and tracked), for testing that migration's upgrade of old rows."""
    with scratch_database(server_url, "onceonly_upgrade") as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE schema_migrations (name text PRIMARY KEY, applied_at timestamptz "
                         "NOT NULL DEFAULT now())")
            for path in sorted(MIGRATIONS_DIR.glob("*.sql")):
                if path.name < migration:
                    conn.execute(path.read_text())
                    conn.execute("INSERT INTO schema_migrations (name) VALUES (%s)", (path.name,))
        yield url
