"""A rotated password: the container still holds the old
secret, PostgreSQL refuses it, the secret is read again once and the connection
retried once with it, for the domain pool and a PostgreSQL coordination store.
Secrets Manager is moto's server on 127.0.0.1; PostgreSQL is real (with trust
auth an unknown role is its authentication failure)."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import boto3
import pytest
from aws_lambda_powertools.utilities.parameters.constants import DEFAULT_PROVIDERS

import onceonly
from onceonly_app.db import clients, settings


def _as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{user}@{parts.hostname}:{parts.port}"))


@pytest.fixture
def secrets(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    monkeypatch.setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", moto_endpoint)
    for name in ("DATABASE_URL", "ONCEONLY_STORE_URL"):
        monkeypatch.delenv(name, raising=False)
    DEFAULT_PROVIDERS.pop("secrets", None)  # Powertools' provider picks the endpoint up when built
    # Never AWS itself: the variable's name must be the one botocore reads.
    assert boto3.session.Session().client("secretsmanager").meta.endpoint_url == moto_endpoint
    clients.reset()
    yield boto3.client("secretsmanager", endpoint_url=moto_endpoint, region_name="us-east-1")
    clients.reset()
    DEFAULT_PROVIDERS.pop("secrets", None)


def _rotated_secret(secrets: object, monkeypatch: pytest.MonkeyPatch, env: str, unique: str, good_url: str) -> None:
    """The container read the secret before a rotation: it caches the old
    credentials (a role that no longer exists) while the secret holds new ones."""
    name = f"onceonly/{unique}/{env.lower()}"
    secrets.create_secret(Name=name, SecretString=_as_user(good_url, "rotated_away"))  # type: ignore[attr-defined]
    monkeypatch.setenv(env, name)
    stale = settings.database_url() if env == "DATABASE_URL_SECRET" else settings.store_url()
    assert "rotated_away@" in stale
    secrets.put_secret_value(SecretId=name, SecretString=good_url)  # type: ignore[attr-defined]


def test_the_domain_pool_reconnects_once_with_the_rotated_secret(
        secrets: object, monkeypatch: pytest.MonkeyPatch, postgres_url: str, unique: str) -> None:
    _rotated_secret(secrets, monkeypatch, "DATABASE_URL_SECRET", unique, postgres_url)
    with clients.db_pool().connection() as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("postgres",)
    assert "rotated_away@" not in clients.db_pool().conninfo()  # type: ignore[operator]


def test_a_postgres_store_reconnects_once_with_the_rotated_secret(
        secrets: object, monkeypatch: pytest.MonkeyPatch, postgres_url: str, unique: str) -> None:
    onceonly.connect(postgres_url).setup()
    _rotated_secret(secrets, monkeypatch, "ONCEONLY_STORE_URL_SECRET", unique, postgres_url)
    lease = clients.coordination_store().acquire(f"rotation-{unique}", ttl=5)
    assert lease is not None and lease.token >= 1


def test_a_secret_that_was_not_rotated_fails_after_one_reread(
        secrets: object, monkeypatch: pytest.MonkeyPatch, postgres_url: str, unique: str) -> None:
    name = f"onceonly/{unique}/wrong"
    secrets.create_secret(Name=name, SecretString=_as_user(postgres_url, "never_existed"))  # type: ignore[attr-defined]
    monkeypatch.setenv("ONCEONLY_STORE_URL_SECRET", name)
    store = onceonly.connect(settings.store_url(), refresh_url=lambda: settings.store_url(refresh=True))
    try:
        with pytest.raises(onceonly.StoreUnavailableError):
            store.acquire(f"wrong-{unique}", ttl=5)
    finally:
        store.close()
