"""Run the installed `onceonly` command as a user would, in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import REPO_ROOT

REPO_ROOT = REPO_ROOT
ONCEONLY = Path(sys.executable).parent / "onceonly"


# What a command falls back to without --database: a port nothing listens on, so
# a test that forgets --database fails ("unreachable") instead of writing to the
# user's default database (postgresql://postgres@127.0.0.1:5432/test).
NO_FALLBACK_DATABASE = "postgresql://no-fallback-in-tests@127.0.0.1:1/pass_database"


def run_cli(*args: str, cwd: Path = REPO_ROOT, timeout: float = 120,
            env: dict[str, str] | None = None, refuse_sockets: bool = False) -> subprocess.CompletedProcess[str]:
    """``refuse_sockets``: the command may open no Python socket (tests/support/cli/cli_without_sockets.py)."""
    assert ONCEONLY.exists(), f"{ONCEONLY} missing: run `pip install -e .` in {REPO_ROOT}"
    given = env or {}
    child_env = dict(os.environ if env is None else env)
    # The user's own DATABASE_URL / ONCEONLY_STORE_URL never reach a test's command.
    child_env["DATABASE_URL"] = given.get("DATABASE_URL", NO_FALLBACK_DATABASE)
    if "ONCEONLY_STORE_URL" not in given:
        child_env.pop("ONCEONLY_STORE_URL", None)
    command = [str(ONCEONLY)]
    if refuse_sockets:
        command = [sys.executable, "-m", "tests.support.cli.cli_without_sockets"]
        child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), child_env.get("PYTHONPATH")]))
    return subprocess.run([*command, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=child_env)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The failure must be exactly one line on stderr, never a traceback."""
    assert result.returncode != 0, result
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, result.stderr
    return lines[0]


def isolated_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment of a run that picks its own stores and temp folder."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "ONCEONLY_STORE_URL")}
    env.update(TMPDIR=str(tmp), **extra)
    return env
