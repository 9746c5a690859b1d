"""No secret and no payload in any log line (docs/security.md): a full
`onceonly simulate` run (webhooks with crashes and retries, every cron job, the
payment watcher) with the functions at DEBUG and POWERTOOLS_LOGGER_LOG_EVENT on,
its replicas' logs kept, and a database URL carrying a planted password. Every
line it wrote (the replicas' logs, the command's stdout and stderr) is scanned
for that password, for webhook signing secrets and signatures, and for the keys
only a webhook payload carries."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.support.cli.cli_support import isolated_env, run_cli

PLANTED_PASSWORD = "Planted-db-pw-7c41e9"
LEAKS = {
    "the database password": re.compile(re.escape(PLANTED_PASSWORD)),
    "a webhook signing secret": re.compile(r"whsec_[A-Za-z0-9+/]{16,}"),
    "a webhook signature": re.compile(r"v1,[A-Za-z0-9+/]{40,}"),
    # Keys that only webhook payloads carry: simulate's events and invoice.paid.
    "a webhook payload": re.compile(r"amount_cents|transaction_hash|paid_at"),
}

pytestmark = pytest.mark.slow


def with_password(url: str, password: str) -> str:
    """``url`` with ``password`` in it (trust auth ignores it; every process still carries it)."""
    parts = urlsplit(url)
    user = parts.username or "postgres"
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))


def leaks_in(name: str, text: str) -> list[str]:
    return [f"{name}:{n}: {what}: {line[:160]}" for n, line in enumerate(text.splitlines(), 1)
            for what, pattern in LEAKS.items() if pattern.search(line)]


def test_a_simulate_run_logs_no_secret_and_no_payload(postgres_server_url: str, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    result = run_cli("simulate", "--json", "--events", "20", "--crash-rate", "0.2", "--seed", "11",
                     "--log-dir", str(logs), "--log-level", "DEBUG",
                     "--database", with_password(postgres_server_url, PLANTED_PASSWORD),
                     env=isolated_env(tmp_path, POWERTOOLS_LOGGER_LOG_EVENT="true"), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["ok"] is True
    texts = {path.name: path.read_text(encoding="utf-8", errors="replace") for path in sorted(logs.glob("*.log"))}
    everything = "\n".join(texts.values())
    # The scan read real logs: deliveries, retries and ticks, at INFO and below.
    for expected in ('"attempt recorded"', '"retry run finished"', '"tick ran"', '"level":"INFO"'):
        assert expected in everything, expected
    texts.update(stdout=result.stdout, stderr=result.stderr)
    assert [leak for name, text in texts.items() for leak in leaks_in(name, text)] == []


def test_the_scan_finds_what_it_looks_for() -> None:
    line = ('{"message":"x","url":"postgresql://u:' + PLANTED_PASSWORD + '@h/db","secret":"whsec_'
            + "A" * 32 + '","sig":"v1,' + "b" * 44 + '","event":{"amount_cents":1}}')
    assert {leak.split(": ")[1] for leak in leaks_in("f", line)} == set(LEAKS)
    assert leaks_in("f", '{"message":"attempt recorded","delivery_id":"msg_1","token":3}') == []
