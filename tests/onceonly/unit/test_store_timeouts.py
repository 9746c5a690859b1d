"""The ``timeout`` URL option and how each backend sizes its driver's own
timeouts from it; Redis durable-mode options. The behaviour against a store
that stops answering is tested through a fault proxy in
tests/onceonly_app/integration/test_store_fail_fast.py."""

from __future__ import annotations

from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict

import onceonly
from onceonly.dynamodb import DynamoDBStore
from onceonly.errors import ConfigError
from onceonly.postgres import PgOptions, split_options
from onceonly.redis import RedisStore
from onceonly.stores.postgres.pool import bounded_conninfo
from onceonly.stores.timeouts import DEFAULT_TIMEOUT, dynamodb_budget

URLS = {
    "postgresql": "postgresql://postgres@127.0.0.1:1/db",
    "redis": "redis://127.0.0.1:1/0",
    "dynamodb": "dynamodb://some-table?region=us-east-1&endpoint_url=http://127.0.0.1:1",
}


def with_option(scheme: str, option: str) -> str:
    url = URLS[scheme]
    return f"{url}{'&' if '?' in url else '?'}{option}"


@pytest.mark.parametrize("scheme", sorted(URLS))
@pytest.mark.parametrize("value", ["0", "-1", "abc", "", "nan", "inf", "901"])
def test_bad_timeout_is_a_config_error_naming_it(scheme: str, value: str) -> None:
    with pytest.raises(onceonly.ConfigError, match="timeout"):
        onceonly.connect(with_option(scheme, f"timeout={value}"))


def test_default_bound_is_at_most_15_seconds() -> None:
    assert DEFAULT_TIMEOUT <= 15


@pytest.mark.parametrize("total", [0.5, 1, 3.9, 4, 10, 15, 60])
def test_dynamodb_attempts_and_backoff_fit_within_the_bound(total: float) -> None:
    attempts, connect, read = dynamodb_budget(total)
    first_backoff = 1.0  # botocore standard mode: random() * 2**0 before the second attempt
    assert attempts >= 1 and connect > 0 and read > 0
    assert attempts * (connect + read) + first_backoff * (attempts - 1) <= total + 1e-9


def test_dynamodb_url_timeout_sizes_the_client() -> None:
    store = onceonly.connect(with_option("dynamodb", "timeout=3"))
    assert isinstance(store, DynamoDBStore)
    config = store._client.meta.config
    assert config.retries["total_max_attempts"] * (config.connect_timeout + config.read_timeout) <= 3
    store.close()


def test_postgres_conninfo_gets_every_bound_but_no_startup_options() -> None:
    conninfo, options = split_options("postgresql://postgres@127.0.0.1:5432/db?timeout=6&sslmode=disable")
    assert options == PgOptions(timeout=6, transaction_pooled=False) and "timeout" not in conninfo_to_dict(conninfo)
    params = conninfo_to_dict(bounded_conninfo(conninfo, options.timeout))
    assert params["sslmode"] == "disable"
    assert params["connect_timeout"] == "3" and params["tcp_user_timeout"] == "3000"
    assert params["keepalives"] == "1" and int(params["keepalives_idle"]) <= 3
    # PgBouncer and RDS Proxy refuse the connection when it sends startup options
    assert "options" not in params


def test_postgres_options_given_in_the_url_win() -> None:
    conninfo, options = split_options(
        "postgresql://u@h/db?connect_timeout=7&options=-c%20statement_timeout%3D0%20-c%20search_path%3Dx"
    )
    params = conninfo_to_dict(bounded_conninfo(conninfo, options.timeout))
    assert params["connect_timeout"] == "7"
    assert params["options"] == "-c statement_timeout=0 -c search_path=x"
    assert options.timeout == DEFAULT_TIMEOUT


def test_postgres_key_value_conninfo_keeps_the_default_bound() -> None:
    assert split_options("host=127.0.0.1 dbname=db") == ("host=127.0.0.1 dbname=db", PgOptions())


@pytest.mark.parametrize(("url", "pooled"), [
    ("postgresql://u@h/db?pool_mode=transaction", True),
    ("postgresql://u@h/db?pool_mode=session", False),
    ("postgresql://u@h/db", False),
    ("postgresql://u@app.proxy-abcdefghijkl.eu-west-1.rds.amazonaws.com/db", True),  # RDS Proxy implies it
    ("host=app.proxy-abcdefghijkl.eu-west-1.rds.amazonaws.com dbname=db", True),
])
def test_postgres_pool_mode_declares_a_transaction_pooler(url: str, pooled: bool) -> None:
    conninfo, options = split_options(url)
    assert options.transaction_pooled is pooled
    assert "pool_mode" not in conninfo_to_dict(conninfo)  # libpq would refuse it


def test_postgres_pool_mode_statement_or_a_typo_is_refused() -> None:
    for mode in ("statement", "transactions"):
        with pytest.raises(ConfigError, match="pool_mode must be one of session, transaction"):
            split_options(f"postgresql://u@h/db?pool_mode={mode}")


def test_redis_url_timeout_sizes_the_client() -> None:
    store = onceonly.connect(with_option("redis", "timeout=3&prefix=app"))
    assert isinstance(store, RedisStore)
    kwargs: dict[str, Any] = store._client.connection_pool.connection_kwargs
    assert (kwargs["socket_connect_timeout"], kwargs["socket_timeout"]) == (1.5, 1.5)
    assert "timeout" not in kwargs and "prefix" not in kwargs


def test_redis_socket_timeout_in_the_url_wins() -> None:
    store = onceonly.connect(with_option("redis", "socket_timeout=2"))
    assert isinstance(store, RedisStore)
    assert store._client.connection_pool.connection_kwargs["socket_timeout"] == 2


@pytest.mark.parametrize("option", ["wait_replicas=-1", "wait_replicas=one", "wait_replicas=1&wait_timeout_ms=0",
                                    "wait_replicas=1&wait_timeout_ms=5000"])
def test_bad_redis_durability_options_are_config_errors(option: str) -> None:
    with pytest.raises(onceonly.ConfigError, match="wait_"):
        onceonly.connect(with_option("redis", option))


def test_redis_client_without_a_connection_pool_is_refused() -> None:
    with pytest.raises(onceonly.ConfigError, match="connection pool"):
        RedisStore(object())  # type: ignore[arg-type]
