"""Store URL options on every backend (docs/coordination.md, "Store URL
options"): an option the store does not list is refused in one line of the
same shape, before anything is sent; a driver option it lists reaches the
driver and the store works with it."""

from __future__ import annotations

from typing import Any

import pytest

import onceonly

STORES = {"postgresql": "PostgreSQL", "redis": "Redis", "dynamodb": "DynamoDB"}


def with_option(url: str, option: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{option}"


def test_an_unknown_option_is_refused_in_one_line(store_url: str) -> None:
    store_name = STORES[store_url.split("://", 1)[0]]
    with pytest.raises(onceonly.ConfigError) as caught:
        onceonly.connect(with_option(store_url, "colour=blue")).close()
    message = str(caught.value)
    assert message.startswith(f"unknown {store_name} URL option 'colour'; accepted: ") and "\n" not in message


def test_a_driver_option_reaches_the_driver(store_url: str, unique: str) -> None:
    kind = store_url.split("://", 1)[0]
    # libpq's and redis-py's name for the connection as the server lists it;
    # on DynamoDB the URL's region and endpoint_url are botocore's already
    # (a store that reached AWS instead of dynalite would fail here).
    option = {"postgresql": f"application_name={unique}", "redis": f"client_name={unique}", "dynamodb": ""}[kind]
    store: Any = onceonly.connect(with_option(store_url, option) if option else store_url)
    try:
        store.setup()
        lease = store.acquire(unique, ttl=30)
        assert lease is not None and store.release(lease)
        if kind == "redis" and "cluster=1" not in store_url:
            clients = store._nodes.client.client_list()
            assert unique in {client["name"] for client in clients}
        if kind == "postgresql" and "pool_mode=transaction" not in store_url:
            with store._pool.connection() as conn:
                (name,) = conn.execute("SELECT current_setting('application_name')").fetchone()
            assert name == unique
    finally:
        store.close()
