"""The domain database pool fails fast too: a scheduled job
whose PostgreSQL stops answering fails before a (scaled) Lambda timeout, its
tick is given back, and the replay after recovery does the work exactly once."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import psycopg_pool
import pytest
from psycopg_pool import ConnectionPool

import onceonly
from onceonly_app.billing import overdue
from onceonly_app.db import clients
from tests.support.jobs import jobs_data as data
from tests.support.jobs.jobs_inprocess import run_tick
from tests.support.servers.faultproxy import FaultProxy
from tests.support.servers.proxied import target_port, through

TIMEOUT = 1.0
LAMBDA_TIMEOUT = 3 * TIMEOUT
DATABASE_DOWN = (psycopg_pool.PoolTimeout, psycopg.OperationalError)


@pytest.fixture
def proxied_db_pool(jobs_db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ConnectionPool, FaultProxy]]:
    """``clients.db_pool()`` (the handlers' pool) built from a DATABASE_URL that
    goes through a fault proxy."""
    with FaultProxy(target_port(jobs_db)) as proxy:
        monkeypatch.setenv("DATABASE_URL", through(jobs_db, proxy.port, TIMEOUT))
        clients.reset()
        try:
            yield clients.db_pool(), proxy
        finally:
            proxy.passthrough()
            clients.reset()


def test_job_on_a_dead_domain_database_fails_fast_and_its_replay_runs_once(
        proxied_db_pool: tuple[ConnectionPool, FaultProxy], pg_store: onceonly.Store, jobs_db: str,
        unique: str) -> None:
    pool, proxy = proxied_db_pool
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        data.add_invoice(conn, tenant, due_at="2026-11-01T00:00:00Z")
        data.ledger_read(conn, unique, tenant=tenant)

    def tick() -> dict[str, object]:
        return run_tick(pg_store, unique, "2026-11-29T02:00:00Z", lambda t: overdue.run(
            pool, t, watcher=unique, tenant=tenant))

    with pool.connection() as conn:  # a warm container: one pooled connection
        conn.execute("SELECT 1")
    proxy.blackhole()
    started = time.monotonic()
    with pytest.raises(DATABASE_DOWN):
        tick()
    assert time.monotonic() - started < LAMBDA_TIMEOUT

    proxy.passthrough()
    deadline = time.monotonic() + 4 * TIMEOUT
    while True:  # a connect begun during the outage may fail one more call
        try:
            first = tick()
            break
        except DATABASE_DOWN:
            assert time.monotonic() < deadline, "the pool did not recover"
    assert first["status"] == "ran" and first["result"].transitioned == 1  # type: ignore[attr-defined]
    assert tick() == {"job": unique, "tick": "2026-11-29T02:00:00Z", "status": "skipped", "reason": "completed"}
    with data.connect(jobs_db) as conn:
        assert len(data.invoice_effects(conn, tenant)["history"]) == 1
