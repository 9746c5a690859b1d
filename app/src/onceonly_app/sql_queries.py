"""Named SQL statements from a .sql file with "-- name: NAME --" headers: how
the app keeps its SQL in files next to the modules that run it."""

from __future__ import annotations

import re
from pathlib import Path

_HEADER = re.compile(r"^-- name: ([a-z_]+) --\s*$", re.MULTILINE)


def load_queries(path: Path) -> dict[str, str]:
    """Parse ``path`` once into {name: statement text}. Text before the first
    header is the file's own comment and is dropped."""
    parts = _HEADER.split(path.read_text(encoding="utf-8"))
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}
