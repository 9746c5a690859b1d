"""The contract suite runs on every backend, on PostgreSQL a second time
through a real transaction-mode PgBouncer (what a deployment behind PgBouncer,
RDS Proxy or Supavisor gets), and on Redis a second time on a real local
Redis Cluster (3 primaries, 3 replicas: what cluster-mode ElastiCache,
ElastiCache Serverless and MemoryDB are)."""

from __future__ import annotations

import pytest

from tests.support import BACKENDS

CONTRACT_BACKENDS = [*BACKENDS, "postgres_pgbouncer", "redis_cluster"]


@pytest.fixture(params=CONTRACT_BACKENDS, ids=[b.replace("_", "-") for b in CONTRACT_BACKENDS])
def store_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_url"))
