"""Helpers shared by several test suites (receivers, workers, fixtures)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
