"""Fixtures of the fence suites (tests/onceonly_app/integration/test_fences_*.py), loaded
with ``pytest_plugins``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.stores.interleave import Interleaving


@pytest.fixture
def interleave() -> Iterator[Interleaving]:
    """Seams and background runs of one test; all let go at teardown."""
    interleaving = Interleaving()
    yield interleaving
    interleaving.close()
