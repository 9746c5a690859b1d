"""connect(): URLs to stores, and bad input or unreachable servers as clear
onceonly errors with the driver's exception kept as the cause."""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest

import onceonly
from onceonly_cli.testing.servers import free_port


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "non-empty"),
        (None, "non-empty"),
        ("mysql://127.0.0.1/db", "unknown store scheme 'mysql'"),
        ("127.0.0.1:6379", "unknown store scheme"),
        ("redis://127.0.0.1:notaport/0", "malformed store URL"),
        ("dynamodb://?region=us-east-1", "needs a table name"),
        ("dynamodb://tbl?region=us-east-1&shards=zero", "shards"),
        ("dynamodb://tbl?region=us-east-1&colour=blue", "colour"),
        ("dynamodb://t?region=us-east-1", "table name"),
        ("postgresql://127.0.0.1/db?nonsense_option=1", "PostgreSQL URL"),
    ],
)
def test_bad_urls_are_config_errors(url: object, message: str) -> None:
    with pytest.raises(onceonly.ConfigError, match=message):
        onceonly.connect(url)  # type: ignore[arg-type]


@pytest.mark.parametrize("scheme", ["postgresql", "redis", "dynamodb"])
def test_unreachable_store_is_store_unavailable_with_cause(scheme: str) -> None:
    port = free_port()  # bound and released: nothing listens there
    url = {
        "postgresql": f"postgresql://postgres@127.0.0.1:{port}/test?timeout=2",
        "redis": f"redis://127.0.0.1:{port}/0",
        "dynamodb": f"dynamodb://tbl?region=us-east-1&endpoint_url=http://127.0.0.1:{port}",
    }[scheme]
    # a short timeout keeps the PostgreSQL case fast; the others fail at once
    store = onceonly.connect(url)
    with pytest.raises(onceonly.StoreUnavailableError) as caught:
        store.acquire("anything", ttl=5)
    assert caught.value.__cause__ is not None
    assert not isinstance(caught.value, (OSError, ConnectionError))
    store.close()


def test_missing_postgres_tables_say_run_setup(postgres_url: str) -> None:
    schema = f"empty_{free_port()}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        store = onceonly.connect(f"{postgres_url}?options=-csearch_path%3D{schema}")
        with pytest.raises(onceonly.StoreNotReadyError, match="setup"):
            store.acquire("x", ttl=5)
        store.close()
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def test_connect_imports_only_the_driver_it_needs() -> None:
    code = (
        "import sys, onceonly; onceonly.connect('redis://127.0.0.1:1/0'); "
        "print(sorted(m for m in ('psycopg', 'boto3', 'redis') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['redis']"
