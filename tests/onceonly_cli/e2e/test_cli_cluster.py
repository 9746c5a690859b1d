"""The operator commands on a Redis Cluster store (the session's local
cluster: 3 primaries, 3 replicas): `onceonly selftest` races its workers there
and leaves nothing, `onceonly status` reads the queue and the leases there."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator

import psycopg
import pytest
import redis
from psycopg import sql

import onceonly
from onceonly_cli.testing.redis_cluster import LocalCluster
from tests.support.cli.cli_support import run_cli
from tests.support.servers.scratch import with_prefix


@pytest.fixture
def migrated_database(postgres_url: str) -> Iterator[str]:
    name = f"onceonly_cli_cluster_{secrets.token_hex(4)}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = postgres_url.rsplit("/", 1)[0] + "/" + name
    from onceonly_app.db.migrate import migrate

    migrate(url)
    yield url
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def _keys(cluster: LocalCluster, pattern: str) -> list[bytes]:
    with redis.RedisCluster.from_url(cluster.url.split("?")[0]) as client:
        return list(client.scan_iter(match=pattern, target_nodes="primaries"))


def test_selftest_on_a_cluster_passes_and_leaves_nothing(redis_cluster: LocalCluster) -> None:
    result = run_cli("selftest", "--store", redis_cluster.url, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASS" in result.stdout and "cluster=1" in result.stdout
    assert _keys(redis_cluster, "onceonly-selftest*") == []


def test_status_reads_the_queue_and_leases_on_a_cluster(redis_cluster: LocalCluster, migrated_database: str) -> None:
    url = with_prefix(redis_cluster.url, f"status-{secrets.token_hex(3)}")
    store = onceonly.connect(url)
    store.queue("webhook-retries").put_many([("d-1", None, None), ("d-2", 4102444800, None)])
    store.close()
    result = run_cli("status", "--json", "--database", migrated_database, "--store", url)
    assert result.returncode == 0, result.stderr
    queue = json.loads(result.stdout)["queue"]
    assert (queue["name"], queue["due"], queue["scheduled"], queue["total"]) == ("webhook-retries", 1, 1, 2)
