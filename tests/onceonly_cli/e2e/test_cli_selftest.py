"""`onceonly selftest` as a user runs it, on each store: it passes on a store
of its own, leaves nothing behind, refuses (without --yes) a store holding other
onceonly data, and fails on the deliberately racy store."""

from __future__ import annotations

import functools
import secrets
from collections.abc import Iterator
from pathlib import Path

import boto3
import psycopg
import pytest
import redis
from rich.console import Console

import onceonly
from onceonly_cli.local.selftest import run_selftest
from onceonly_cli.local.selftest_session import render
from onceonly_cli.local.selftest_targets import PREFIX
from onceonly_cli.local.selftest_worker import Plan
from onceonly_cli.testing.history import read, summarize
from tests.support.cli.cli_support import one_line_error, run_cli
from tests.support.servers.scratch import (
    delete_prefix,
    delete_table,
    scratch_database,
    scratch_redis_prefix,
    with_prefix,
)
from tests.support.stores.racy_store import RacyStore

pytestmark = pytest.mark.concurrency
RUN = ("--procs", "3", "--items", "60", "--seconds", "4")
SMALL_RUN = ("--procs", "2", "--items", "20", "--seconds", "2")


@pytest.fixture(params=["postgres", "redis", "dynamodb"])
def own_store_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """An empty store of the test's own: a database, a key prefix or a table."""
    if request.param == "postgres":
        with scratch_database(request.getfixturevalue("postgres_server_url"), "onceonly_selftest") as url:
            yield url
    elif request.param == "redis":
        with scratch_redis_prefix(request.getfixturevalue("redis_server_url"), "selftest-target") as url:
            yield url
    else:
        endpoint = request.getfixturevalue("dynalite_endpoint")
        url = f"dynamodb://selftest-target-{secrets.token_hex(4)}?region=us-east-1&endpoint_url={endpoint}"
        yield url
        delete_table(url)


def selftest_records(url: str) -> list[str]:
    """Whatever a selftest run left in the store, read from the store's own data."""
    if url.startswith("postgresql"):
        with psycopg.connect(url) as conn:
            return [r[0] for r in conn.execute(
                "SELECT name FROM onceonly_leases WHERE starts_with(name, %(p)s) "
                "UNION ALL SELECT item_id FROM onceonly_queue WHERE starts_with(queue, %(p)s)", {"p": PREFIX})]
    if url.startswith("redis"):
        client = redis.Redis.from_url(url.split("?", 1)[0])
        try:
            return [k.decode() for k in client.scan_iter(match=f"{PREFIX}*")]
        finally:
            client.close()
    endpoint = url.split("endpoint_url=", 1)[1]
    client = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=endpoint)
    items = client.scan(TableName=url.split("//", 1)[1].split("?", 1)[0])["Items"]
    return [i["pk"]["S"] for i in items if PREFIX in i["pk"]["S"]]


def test_selftest_passes_leaves_nothing_and_guards_other_data(own_store_url: str, tmp_path: Path) -> None:
    history = tmp_path / "history.jsonl"
    result = run_cli("selftest", "--store", own_store_url, *RUN, "--history", str(history), timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASS" in result.stdout
    summary = summarize(read(history))
    assert summary.violations == []
    assert summary.items == summary.acked == 60
    assert summary.grants > summary.items  # leases were granted too, besides one claim per item
    winners = {e["worker"] for e in read(history) if e["event"] == "ok" and e["op"] in ("acquire", "claim")}
    assert len(winners - {"drain"}) >= 2, f"only {winners} won: the workers did not race"
    assert selftest_records(own_store_url) == []

    # The user's own data appears: no run without --yes.
    store = onceonly.connect(own_store_url)
    try:
        users_lease = store.acquire("users-own-job", ttl=60)
        assert users_lease is not None
    finally:
        store.close()
    refused = run_cli("selftest", "--store", own_store_url, *SMALL_RUN)
    assert "--yes" in one_line_error(refused)
    assert "PASS" not in refused.stdout
    allowed = run_cli("selftest", "--store", own_store_url, *SMALL_RUN, "--yes", timeout=180)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert selftest_records(own_store_url) == []
    store = onceonly.connect(own_store_url)
    try:
        state = store.inspect("users-own-job")
        assert state is not None and (state.token, state.owner) == (users_lease.token, users_lease.owner)  # untouched
    finally:
        store.close()


@pytest.mark.soak
def test_selftest_soak(own_store_url: str, tmp_path: Path) -> None:
    history = tmp_path / "history.jsonl"
    result = run_cli("selftest", "--store", own_store_url, "--procs", "8", "--items", "1000", "--seconds", "30",
                     "--history", str(history), timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = summarize(read(history))
    assert summary.violations == [] and summary.items == summary.acked == 1000
    assert selftest_records(own_store_url) == []


def test_selftest_fails_on_a_racy_store(redis_server_url: str, tmp_path: Path) -> None:
    url = with_prefix(redis_server_url, f"racy-{secrets.token_hex(4)}")
    plan = Plan(f"{PREFIX}{secrets.token_hex(4)}", procs=3, items=60, seconds=5)
    try:
        result = run_selftest(functools.partial(RacyStore, url), plan, tmp_path / "history.jsonl")
    finally:
        delete_prefix(url)
    assert result.winners >= 2 and not result.stuck  # the run itself went through: the verdict is the store's
    assert not result.passed
    kinds = {v.kind for v in result.summary.violations}
    assert "duplicate_token" in kinds or "overlap" in kinds, kinds
    console = Console(record=True, width=120)
    render(result, console)
    assert "FAIL" in console.export_text()


@pytest.mark.parametrize(("args", "expected"), [
    ((), "no store"),
    (("--store", "redis://127.0.0.1:1/0", "--procs", "1"), "at least 2"),
    (("--store", "mysql://x"), "expected postgresql://"),
    (("--store", "redis://127.0.0.1:1/0"), "unreachable"),
])
def test_selftest_errors_are_one_line(args: tuple[str, ...], expected: str) -> None:
    assert expected in one_line_error(run_cli("selftest", *args))
