"""A simulation's own database and store (simulate/run_scope.py), on the real
servers: each run gets fresh ones, apart from the given URL's data, and the
closers remove them."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from urllib.parse import parse_qsl, urlsplit

import boto3
import psycopg
import redis

import onceonly
from onceonly_cli.simulate.run_scope import run_database, run_store


def _databases(server_url: str) -> set[str]:
    with psycopg.connect(server_url) as conn:
        return {row[0] for row in conn.execute("SELECT datname FROM pg_database")}


def _close(closers: list[Callable[[], None]]) -> None:
    for close in reversed(closers):
        close()


def _grant_and_complete(url: str, name: str) -> None:
    store = onceonly.connect(url)
    try:
        store.setup()
        lease = store.acquire(name, ttl=30)
        assert lease is not None, f"{name} already taken in {url}: the run's store is not fresh"
        assert store.complete(lease, keep=600)
    finally:
        store.close()


def test_each_run_gets_its_own_postgres_database_dropped_at_the_end(postgres_server_url: str) -> None:
    closers: list[Callable[[], None]] = []
    run_id = secrets.token_hex(3)
    url = run_database(postgres_server_url, run_id, closers)
    store_url = run_store(postgres_server_url, run_id, closers)
    names = {urlsplit(url).path.lstrip("/"), urlsplit(store_url).path.lstrip("/")}
    assert names == {f"onceonly_sim_{run_id}", f"onceonly_sim_{run_id}_store"}
    assert names <= _databases(postgres_server_url)
    _grant_and_complete(store_url, "tick:job:2026-12-01T02:00:00Z")
    _close(closers)
    assert not names & _databases(postgres_server_url)


def test_two_runs_on_one_redis_never_meet_and_leave_no_keys(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url.split("?", 1)[0])
    runs = []
    for _ in range(2):
        closers: list[Callable[[], None]] = []
        url = run_store(redis_url, secrets.token_hex(3), closers)
        _grant_and_complete(url, "tick:job:2026-12-01T02:00:00Z")  # the same tick in both runs
        runs.append((url, closers))
    prefixes = [dict(parse_qsl(urlsplit(url).query))["prefix"] for url, _ in runs]
    base = dict(parse_qsl(urlsplit(redis_url).query))["prefix"]
    assert len(set(prefixes)) == 2 and all(p.startswith(f"{base}-sim-") for p in prefixes)
    for (_url, closers), prefix in zip(runs, prefixes, strict=True):
        assert client.keys(f"{prefix}:*")
        _close(closers)
        assert not client.keys(f"{prefix}:*")
    client.close()


def test_two_runs_on_one_dynamodb_never_meet_and_their_tables_go(dynalite_endpoint: str) -> None:
    dynamodb = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=dynalite_endpoint)
    url = f"dynamodb://onceonly-user?region=us-east-1&endpoint_url={dynalite_endpoint}"
    tables = []
    for _ in range(2):
        closers: list[Callable[[], None]] = []
        scoped = run_store(url, secrets.token_hex(3), closers)
        _grant_and_complete(scoped, "tick:job:2026-12-01T02:00:00Z")
        table = urlsplit(scoped).netloc
        assert table.startswith("onceonly-user-sim-") and table in dynamodb.list_tables()["TableNames"]
        _close(closers)
        tables.append(table)
        assert table not in dynamodb.list_tables()["TableNames"]
    assert len(set(tables)) == 2
    assert "onceonly-user" not in dynamodb.list_tables()["TableNames"]  # the user's table is never touched
