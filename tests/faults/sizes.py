"""Sizes of the fault scenarios: the CI quick part and the soak (``-m soak``,
scripts/soak). Every test takes its size from one of these parameter lists."""

from __future__ import annotations

from typing import Any

import pytest

STORES = ["postgres", "redis", "dynamodb"]
SOAK_TIMEOUT = 900  # seconds, per soak test (pytest-timeout; the default is 300)


def sizes(quick: dict[str, Any], soak: dict[str, Any]) -> Any:
    return pytest.mark.parametrize("size", [
        pytest.param(quick, id="quick"),
        pytest.param(soak, id="soak", marks=[pytest.mark.soak, pytest.mark.timeout(SOAK_TIMEOUT)]),
    ])
