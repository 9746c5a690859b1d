"""Check first, then start: a missing stand-in is one line with its fix before
any work, not a failure after the first store's run (`--store all` used to run
PostgreSQL and Redis for 40 s and only then find no dynalite)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.cli.cli_support import one_line_error, run_cli

MISSING = "dynalite not found at"


@pytest.mark.parametrize("command", [
    ("simulate", "--store", "all", "--events", "5"),
    ("simulate", "--store", "dynamodb", "--events", "5"),
    ("invoke", "OverdueInvoicesFunction", "--event", "events/overdue_invoices.json", "--store", "dynamodb"),
], ids=["simulate-all", "simulate-dynamodb", "invoke-dynamodb"])
def test_a_missing_dynalite_is_one_line_with_its_fix_before_any_work(tmp_path: Path, command: tuple[str, ...]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "ONCEONLY_STORE_URL")}
    env = {**env, "ONCEONLY_DYNALITE_MODULE": str(tmp_path / "no-dynalite"), "TMPDIR": str(tmp_path)}
    result = run_cli(*command, env=env, timeout=60)
    line = one_line_error(result)
    assert MISSING in line and "npm ci" in line, line
    # No run began (simulate prints a rule per store before it), and nothing
    # left a folder behind (an embedded PostgreSQL, a replica's logs).
    assert "store: postgresql" not in result.stderr
    assert not list(tmp_path.glob("onceonly-*")), list(tmp_path.iterdir())
