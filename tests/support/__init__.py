"""Helpers shared by several test suites.

The editable install maps the packages that existed when it was made; a newer
top-level package of the layer (e.g. ``webhooks``) is found through ``shared/``
on sys.path until the project is reinstalled (``pip install -e .``)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED = REPO_ROOT / "shared"
if str(SHARED) not in sys.path:
    sys.path.append(str(SHARED))
