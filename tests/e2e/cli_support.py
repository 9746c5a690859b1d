"""Run the installed `onceonly` command as a user would, in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
ONCEONLY = Path(sys.executable).parent / "onceonly"


def run_cli(*args: str, cwd: Path = REPO_ROOT, timeout: float = 120,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    assert ONCEONLY.exists(), f"{ONCEONLY} missing: run `pip install -e .` in {REPO_ROOT}"
    return subprocess.run([str(ONCEONLY), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The failure must be exactly one line on stderr, never a traceback."""
    assert result.returncode != 0, result
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, result.stderr
    return lines[0]
