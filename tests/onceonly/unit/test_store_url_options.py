"""Every store URL option that a store does not accept, and every bad value of
one it does, is a ConfigError naming the option, raised by ``connect()``
itself: not a TypeError from the driver on every call, not a silent default,
not a StoreUnavailableError after a pool's wait. The servers named here are
closed ports on 127.0.0.1; nothing is sent (the stores connect lazily, and
these never get that far). The accepted options are tested against the real
servers in tests/onceonly/integration/test_store_url_options.py."""

from __future__ import annotations

import time
from typing import Any

import pytest

import onceonly
from onceonly_cli.testing.servers import free_port

PORT = free_port()
PG = f"postgresql://postgres@127.0.0.1:{PORT}/db"
REDIS = f"redis://127.0.0.1:{PORT}/0"
DDB = f"dynamodb://table?region=us-east-1&endpoint_url=http://127.0.0.1:{PORT}"

BAD = [
    # PostgreSQL: onceonly's own options
    (f"{PG}?timeout=abc", "timeout"),
    (f"{PG}?timeout=0", "timeout"),
    (f"{PG}?timeout=", "timeout"),
    (f"{PG}?pool_mode=statement", "pool_mode"),
    # PostgreSQL: libpq's, refused by libpq's parser (unknown) or by onceonly (values libpq checks late)
    (f"{PG}?timout=5", "timout"),
    (f"{PG}?sslmode=bogus", "sslmode"),
    (f"{PG}?sslmode=REQUIRE", "sslmode"),
    (f"{PG}?connect_timeout=abc", "connect_timeout"),
    (f"{PG}?connect_timeout=-1", "connect_timeout"),
    (f"{PG}?target_session_attrs=bogus", "target_session_attrs"),
    (f"{PG}?gssencmode=always", "gssencmode"),
    (f"{PG}?channel_binding=maybe", "channel_binding"),
    (f"{PG}?keepalives=on", "keepalives"),
    (f"{PG}?keepalives_idle=1.5", "keepalives_idle"),
    (f"{PG}?tcp_user_timeout=soon", "tcp_user_timeout"),
    (f"{PG}?port=abc", "port"),
    (f"{PG}?port=70000", "port"),
    (f"{PG}?require_auth=plaintext", "require_auth"),
    (f"{PG}?ssl_min_protocol_version=SSLv3", "ssl_min_protocol_version"),
    ("host=127.0.0.1 dbname=db sslmode=bogus", "sslmode"),  # a key=value conninfo too
    # Redis
    (f"{REDIS}?timout=5", "timout"),
    (f"{REDIS}?retry_on_timeout=1", "retry_on_timeout"),  # the store sends each script once, on purpose
    (f"{REDIS}?ssl_ca_certs=/tmp/ca.pem", "ssl_ca_certs"),  # TLS options only with rediss://
    (f"redis://127.0.0.1:{PORT}/abc", "path"),
    (f"redis://127.0.0.1:{PORT}/0/1", "path"),
    (f"redis://127.0.0.1:{PORT}/-1", "path"),
    (f"{REDIS}#frag", "fragment"),
    (f"{REDIS}?db=x", "db"),
    (f"{REDIS}?db=", "db"),
    (f"{REDIS}?socket_timeout=abc", "socket_timeout"),
    (f"{REDIS}?socket_timeout=0", "socket_timeout"),
    (f"{REDIS}?socket_connect_timeout=inf", "socket_connect_timeout"),
    (f"{REDIS}?socket_keepalive=maybe", "socket_keepalive"),
    (f"{REDIS}?health_check_interval=-5", "health_check_interval"),
    (f"{REDIS}?max_connections=0", "max_connections"),
    (f"{REDIS}?protocol=9", "protocol"),
    (f"{REDIS}?timeout=abc", "timeout"),
    (f"{REDIS}?prefix=", "prefix"),
    (f"{REDIS}?wait_replicas=one", "wait_replicas"),
    (f"{REDIS}?wait_timeout_ms=0", "wait_timeout_ms"),
    (f"{REDIS}?allow_eviction=maybe", "allow_eviction"),
    (f"{REDIS}?=1", "''"),
    # DynamoDB
    (f"{DDB}&shard=3", "shard"),
    (f"{DDB}&shards=0", "shards"),
    (f"{DDB}&shards=", "shards"),
    (f"{DDB}&timeout=never", "timeout"),
    (f"{DDB}&clock_skew=-1", "clock_skew"),
    (f"{DDB}&clock_skew=soon", "clock_skew"),
    (f"{DDB}&clock_skew=3601", "clock_skew"),
    (DDB.replace("us-east-1", "us east 1"), "region"),
    (DDB.replace("us-east-1", ""), "region"),
    (f"dynamodb://table?region=us-east-1&endpoint_url=ftp://127.0.0.1:{PORT}", "endpoint_url"),
    ("dynamodb://table/extra?region=us-east-1", "path"),
]


@pytest.mark.parametrize(("url", "option"), BAD, ids=[url.split("//")[-1].replace(str(PORT), "PORT") for url, _ in BAD])
def test_a_bad_option_is_a_config_error_naming_it_at_connect(url: str, option: str) -> None:
    started = time.monotonic()
    with pytest.raises(onceonly.ConfigError) as caught:
        onceonly.connect(url).close()
    assert option in str(caught.value)
    assert time.monotonic() - started < 1.0, "connect() waited for something: it sent a request"


@pytest.mark.parametrize(("url", "store"), [(PG, "PostgreSQL"), (REDIS, "Redis"), (DDB, "DynamoDB")],
                         ids=["postgres", "redis", "dynamodb"])  # the URLs hold a free port: not an id xdist can share
def test_an_unknown_option_is_refused_the_same_way_on_every_store(url: str, store: str) -> None:
    joined = f"{url}{'&' if '?' in url else '?'}colour=blue"
    with pytest.raises(onceonly.ConfigError) as caught:
        onceonly.connect(joined).close()
    message = str(caught.value)
    assert message.startswith(f"unknown {store} URL option 'colour'; accepted: "), message
    assert "\n" not in message and "timeout" in message  # one line, listing what the store takes


def test_a_libpq_keyword_onceonly_does_not_pass_on_is_refused_in_a_conninfo_too() -> None:
    from onceonly.postgres import bounded_pool

    with pytest.raises(onceonly.ConfigError, match="unknown PostgreSQL URL option 'replication'"):
        onceonly.connect(f"{PG}?replication=database").close()
    with pytest.raises(onceonly.ConfigError, match="unknown PostgreSQL URL option 'replication'"):
        bounded_pool("host=127.0.0.1 dbname=db replication=database", name="t", max_size=1, autocommit=True)


def test_known_driver_options_reach_the_driver() -> None:
    from psycopg.conninfo import conninfo_to_dict

    store: Any = onceonly.connect(f"{PG}?application_name=oo-test&sslmode=disable&connect_timeout=3&timeout=4")
    try:
        given = conninfo_to_dict(store._pool.conninfo)
        assert (given["application_name"], given["sslmode"], given["connect_timeout"]) == ("oo-test", "disable", "3")
        assert "timeout" not in given  # onceonly's own option stays with onceonly
    finally:
        store.close()
    store = onceonly.connect(f"{REDIS}?client_name=oo-test&socket_keepalive=yes&health_check_interval=7")
    try:
        kwargs = store._nodes.client.connection_pool.connection_kwargs
        assert (kwargs["client_name"], kwargs["socket_keepalive"], kwargs["health_check_interval"]) == (
            "oo-test", True, 7)
    finally:
        store.close()
    store = onceonly.connect(DDB.replace("us-east-1", "eu-west-1"))
    try:
        assert store._table.client.meta.region_name == "eu-west-1"
        assert store._table.client.meta.endpoint_url == f"http://127.0.0.1:{PORT}"
    finally:
        store.close()
