"""Fixtures of the endpoint-operation suites (loaded with ``pytest_plugins``,
beside webhook_fixtures and jobs_fixtures): a connection to the domain
database, a tenant billing knows, and the handlers' environment on a
PostgreSQL coordination store with a retry queue of the test's own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import onceonly
from onceonly_app.webhooks import subscriptions
from onceonly_app.webhooks.signing import new_secret
from onceonly_cli.testing.receiver import Behaviour, WebhookReceiver
from tests.support.delivery.webhooks import UNLIMITED, new_id, webhook_env

LOCAL = frozenset({"127.0.0.1"})  # the receiver's host, allowed plain http as the handlers' env allows


@pytest.fixture
def conn(webhook_db: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(webhook_db, autocommit=True) as connection:
        yield connection


@pytest.fixture
def tenant(conn: psycopg.Connection) -> str:
    """A tenant billing knows (its settings row)."""
    name = new_id("tenant")
    conn.execute("INSERT INTO billing_tenants (tenant_id) VALUES (%s)", (name,))
    return name


@pytest.fixture
def pg_env(webhook_db: str, postgres_url: str, pg_store: onceonly.Store) -> dict[str, str]:
    return webhook_env(webhook_db, postgres_url, WEBHOOK_QUEUE=new_id("webhook-retries"))


def add_subscription(conn: psycopg.Connection, tenant: str, receiver: WebhookReceiver,
                     behaviour: Behaviour | None = None, **settings: Any) -> tuple[str, str]:
    """A subscription made through the API, to a new endpoint of ``receiver``
    (unlimited, as in tests/support/delivery/webhooks.py); returns (id, secret)."""
    secret = settings.pop("secret", None) or new_secret()
    url = receiver.endpoint(new_id("ep"), secret, behaviour)
    added = subscriptions.add(conn, tenant, url, allow_http_hosts=LOCAL, secret=secret, **UNLIMITED, **settings)
    assert added.secret == secret
    return added.id, secret
