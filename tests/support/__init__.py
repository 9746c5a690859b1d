"""Helpers shared by the test suites, grouped by kind: ``servers`` (the real
servers and the intermediaries in front of them), ``stores`` (recorded,
paused and faulty stores), ``races`` (multi-process runs and their
histories), ``delivery`` and ``jobs`` (the app's fixtures and workers),
``functions``, ``deploy`` (templates, stacks, built functions) and ``cli``
(the installed command)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # the one place the tests work the repository out

# The coordination stores every contract runs on.
BACKENDS = ["postgres", "redis", "dynamodb"]
