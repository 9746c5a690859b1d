"""Compile layer/requirements.txt, the layer's lock (exact versions and
hashes), from the ranges the library (pyproject.toml: its store extras) and
the app (app/pyproject.toml) declare, for Python 3.13, the layer's runtime:

    python3.13 -m pip install pip-tools
    python3.13 layer/lock.py [--upgrade-package NAME]

The ranges live in those two files only; this writes them to a temporary
input for pip-compile (the app's own requirement on the library is the
library itself, installed from this repository, so it is left out)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "layer" / "requirements.txt"


def layer_ranges() -> list[str]:
    library = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    app = tomllib.loads((REPO / "app" / "pyproject.toml").read_text())["project"]["dependencies"]
    ranges = [*library["postgres"], *library["redis"], *library["dynamodb"], *app]
    return [r for r in ranges if not r.startswith("onceonly")]


HEADER = "# The layer's lock: written by layer/lock.py from the ranges in pyproject.toml and app/pyproject.toml.\n"


def main(extra: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "ranges.in"
        source.write_text("\n".join(layer_ranges()) + "\n")
        status = subprocess.call([
            sys.executable, "-m", "piptools", "compile", "--quiet", "--allow-unsafe", "--generate-hashes",
            "--no-emit-find-links", "--no-emit-index-url", "--strip-extras", "--no-header",
            "--output-file", str(LOCK), str(source), *extra,
        ])
    if status == 0:
        LOCK.write_text(HEADER + LOCK.read_text().replace(f"-r {source}", "the declared ranges"))
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
