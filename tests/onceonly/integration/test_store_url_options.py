"""The options docs/coordination.md lists as accepted ("Store URL options")
are accepted, and work, against the real servers: the strict checks of
tests/onceonly/unit/test_store_url_options.py refuse nothing a user may write."""

from __future__ import annotations

import pytest

import onceonly


def works(url: str, unique: str) -> None:
    store = onceonly.connect(url)
    try:
        store.setup()
        lease = store.acquire(unique, ttl=30)
        assert lease is not None and store.release(lease)
    finally:
        store.close()


def with_options(url: str, options: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{options}"


@pytest.mark.parametrize("options", [
    "timeout=5&pool_mode=session",
    "sslmode=disable&gssencmode=disable&target_session_attrs=any&channel_binding=prefer",
    "connect_timeout=3&keepalives=1&keepalives_idle=5&keepalives_interval=2&keepalives_count=3"
    "&tcp_user_timeout=4000&application_name=onceonly-test",
    "sslmode=prefer&ssl_min_protocol_version=TLSv1.2&target_session_attrs=read-write&port=",
])
def test_accepted_postgres_options_connect(postgres_url: str, options: str, unique: str) -> None:
    works(with_options(postgres_url, options), unique)


@pytest.mark.parametrize("options", [
    "timeout=5&wait_replicas=0&wait_timeout_ms=500&allow_eviction=0",
    "socket_timeout=3&socket_connect_timeout=2&socket_keepalive=yes&health_check_interval=30",
    "max_connections=8&client_name=onceonly-test&protocol=3",
    "db=0&protocol=2&socket_keepalive=false",
])
def test_accepted_redis_options_connect(redis_url: str, options: str, unique: str) -> None:
    works(with_options(redis_url, options), unique)


def test_a_redis_database_path_is_that_database(redis_server_url: str, unique: str) -> None:
    base = redis_server_url.rsplit("/", 1)[0]
    store = onceonly.connect(f"{base}/3?prefix={unique}")
    try:
        lease = store.acquire("n", ttl=30)
        assert lease is not None
        import redis

        on_db3 = redis.Redis.from_url(f"{base}/3")
        try:
            assert on_db3.exists(f"{unique}:{{lease:n}}") == 1
            on_db3.delete(f"{unique}:{{lease:n}}")
        finally:
            on_db3.close()
    finally:
        store.close()


@pytest.mark.parametrize("options", ["shards=4&timeout=5", "shards=8&clock_skew=0.5", "clock_skew=0"])
def test_accepted_dynamodb_options_connect(dynamodb_url: str, options: str, unique: str) -> None:
    works(with_options(dynamodb_url, options), unique)
