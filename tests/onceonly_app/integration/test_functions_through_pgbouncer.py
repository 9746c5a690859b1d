"""The webhook and billing functions' database access, and the deploy's
schema step, through a real transaction-mode PgBouncer: the domain
database and the coordination store both reached through it with
``pool_mode=transaction``, as a deployment behind PgBouncer, RDS Proxy or
Supavisor reaches them. The scenarios are the direct-connection suites' own,
run on pooled clients."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from psycopg_pool import ConnectionPool

import onceonly
from onceonly_app.db import clients
from onceonly_app.db.migrate import MIGRATIONS_DIR
from onceonly_app.schema_step import apply_schema
from onceonly_cli.testing.receiver import WebhookReceiver
from tests.onceonly_app.integration.test_jobs_overdue import (
    test_moves_open_invoices_due_before_the_tick_and_records_each_once as overdue_moves_each_invoice_once,
)
from tests.onceonly_app.integration.test_webhooks_retry import (
    test_a_failed_first_attempt_is_retried_with_the_same_webhook_id as failed_attempt_is_retried,
)
from tests.support.delivery.webhooks import new_id, webhook_env
from tests.support.jobs import jobs_data as data
from tests.support.servers.pgbouncer import PgBouncer
from tests.support.servers.scratch import scratch_database


def pooled(pgbouncer: PgBouncer, url: str) -> str:
    return pgbouncer.url(url, pool_mode="transaction")


@pytest.fixture
def pooled_store(pgbouncer: PgBouncer, postgres_url: str) -> Iterator[onceonly.Store]:
    store = onceonly.connect(pooled(pgbouncer, postgres_url))
    store.setup()
    yield store
    store.close()


@pytest.fixture
def pooled_db_pool(pgbouncer: PgBouncer, jobs_db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ConnectionPool]:
    """``clients.db_pool()``, the handlers' own pool, on a DATABASE_URL through PgBouncer."""
    monkeypatch.setenv("DATABASE_URL", pooled(pgbouncer, jobs_db))
    clients.reset()
    try:
        yield clients.db_pool()
    finally:
        clients.reset()


def test_webhook_dispatch_and_retry_through_pgbouncer(
        pgbouncer: PgBouncer, webhook_db: str, postgres_url: str, pooled_store: onceonly.Store,
        receiver: WebhookReceiver) -> None:
    env = webhook_env(pooled(pgbouncer, webhook_db), pooled(pgbouncer, postgres_url),
                      WEBHOOK_QUEUE=new_id("webhook-retries"))
    failed_attempt_is_retried(env, webhook_db, receiver)


def test_overdue_invoices_job_through_pgbouncer(
        pooled_db_pool: ConnectionPool, pooled_store: onceonly.Store, jobs_db: str, unique: str) -> None:
    with data.connect(jobs_db) as conn:
        data.ledger_read(conn, unique, tenant=f"tenant-{unique}")  # the watcher has read the ledger: not held
    overdue_moves_each_invoice_once(pooled_db_pool, pooled_store, jobs_db, unique)


def test_the_schema_step_applies_through_pgbouncer(pgbouncer: PgBouncer, postgres_server_url: str) -> None:
    """The deploy's schema step (migrations, then the store's setup()) on a
    fresh database, both URLs through the pooler with pool_mode=transaction."""
    with scratch_database(postgres_server_url, "onceonly_schema_pgbouncer") as url:
        through = pooled(pgbouncer, url)
        first = apply_schema(through, through)
        assert first.migrations_applied == sorted(p.name for p in MIGRATIONS_DIR.glob("*.sql"))
        assert first.store_kind == "postgresql"
        assert apply_schema(through, through).migrations_applied == []
