"""Where the functions find their stores on AWS: a secret holding a URL or
RDS's JSON, the RDS CA bundle for verify-full, an RDS Proxy endpoint, and the
connection options that follow (no prepared statements behind the proxy)."""

from __future__ import annotations

import ssl
from pathlib import Path

import psycopg
import pytest

from onceonly.errors import ConfigError
from onceonly.postgres import prepare_threshold_for, split_options
from onceonly.redis import RedisStore
from onceonly.stores.postgres.connection import is_auth_failure
from onceonly_app.db import settings
from onceonly_app.db.settings import url_from_secret, with_ca_bundle


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DATABASE_URL", "DATABASE_HOST", "DATABASE_PORT", "DATABASE_NAME", "DATABASE_SSLMODE",
                 "DATABASE_PROXY_ENDPOINT", "ONCEONLY_STORE_URL"):
        monkeypatch.delenv(name, raising=False)


def test_a_url_secret_is_used_as_stored_less_surrounding_whitespace() -> None:
    assert url_from_secret("  postgresql://u:p@db:5432/app\n", "database") == "postgresql://u:p@db:5432/app"


def test_an_rds_json_secret_becomes_a_verifying_url_with_its_password_encoded() -> None:
    secret = ('{"engine": "postgres", "username": "app", "password": "p@ss:/w?rd#1", "host": "db.example.com",'
              ' "port": 5433, "dbname": "billing", "dbInstanceIdentifier": "db"}')
    url = url_from_secret(secret, "database")
    parts = psycopg.conninfo.conninfo_to_dict(url)
    assert parts == {"user": "app", "password": "p@ss:/w?rd#1", "host": "db.example.com", "port": "5433",
                     "dbname": "billing", "sslmode": "verify-full"}


def test_an_rds_managed_master_secret_takes_host_and_name_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_HOST", "db.internal")
    monkeypatch.setenv("DATABASE_NAME", "app")
    monkeypatch.setenv("DATABASE_SSLMODE", "require")
    url = url_from_secret('{"username": "master", "password": "pw"}', "database")
    assert url == "postgresql://master:pw@db.internal:5432/app?sslmode=require"


@pytest.mark.parametrize(("secret", "message"), [
    ('{"username": "u", "password": "p"}', r"lacks host \(or DATABASE_HOST\)"),
    ('{"host": "h"}', "lacks username, password"),
    ('{"engine": "mysql", "username": "u", "password": "p", "host": "h"}', "engine 'mysql'"),
    ('{"username": ', "not valid JSON"),
])
def test_a_bad_json_secret_is_a_config_error_naming_what_is_wrong(secret: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        url_from_secret(secret, "store")


def test_verify_full_uses_the_shipped_rds_bundle(tmp_path: Path) -> None:
    bundle = tmp_path / "rds-global-bundle.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    url = with_ca_bundle("postgresql://u:p@db/app?sslmode=verify-full", bundle)
    assert psycopg.conninfo.conninfo_to_dict(url)["sslrootcert"] == str(bundle)
    own = "postgresql://u@db/app?sslmode=verify-full&sslrootcert=system"
    assert with_ca_bundle(own, bundle) == own
    for untouched in ("postgresql://u@db/app?sslmode=require", "postgresql://u@db/app", "rediss://:t@cache:6379/0"):
        assert with_ca_bundle(untouched, bundle) == untouched


def test_verify_full_without_the_bundle_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"needs the RDS CA bundle at .*docs/deploy.md"):
        with_ca_bundle("postgresql://u@db/app?sslmode=verify-full", tmp_path / "absent.pem")


def test_the_proxy_endpoint_replaces_the_host_and_turns_prepared_statements_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = "onceonly.proxy-abcdefghijkl.eu-west-1.rds.amazonaws.com"
    monkeypatch.setenv("DATABASE_URL", "postgresql://app:s%40cret@db.abc.eu-west-1.rds.amazonaws.com:5432/app")
    assert prepare_threshold_for(split_options(settings.database_url())[1].transaction_pooled) == 5
    monkeypatch.setenv("DATABASE_PROXY_ENDPOINT", proxy)
    url = settings.database_url()
    assert url == f"postgresql://app:s%40cret@{proxy}/app"
    assert prepare_threshold_for(split_options(url)[1].transaction_pooled) is None
    assert not split_options("postgresql://u@db.proxy-x.example.com/app")[1].transaction_pooled  # not an RDS Proxy


def test_auth_failures_are_told_from_other_connection_errors() -> None:
    refused = psycopg.OperationalError('connection failed: FATAL:  password authentication failed for user "app"')
    unknown = psycopg.OperationalError('connection failed: FATAL:  role "old" does not exist')
    down = psycopg.OperationalError("connection failed: Connection refused")
    assert is_auth_failure(refused) and is_auth_failure(unknown) and not is_auth_failure(down)


def test_rediss_with_an_auth_token_uses_tls_and_the_token() -> None:
    store = RedisStore.from_url("rediss://:s3cret-token@cache.example.com:6379/0?prefix=app")
    try:
        pool = store._client.connection_pool
        assert pool.connection_class.__name__ == "SSLConnection"
        assert pool.connection_kwargs["password"] == "s3cret-token"
        connection = pool.connection_class(**pool.connection_kwargs)  # built, never connected
        assert connection.cert_reqs == ssl.CERT_REQUIRED  # the server's certificate is verified
    finally:
        store.close()
