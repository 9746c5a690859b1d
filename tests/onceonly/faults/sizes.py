"""Sizes of the fault scenarios: the CI quick part and the soak (``-m soak``,
scripts/soak). Every test takes its size from one of these parameter lists."""

from __future__ import annotations

from typing import Any

import pytest

STORES = ["postgres", "redis", "dynamodb"]
SOAK_TIMEOUT = 1500  # seconds, per soak test (pytest-timeout; the default is 300)


def sizes(quick: dict[str, Any], soak: dict[str, Any]) -> Any:
    return pytest.mark.parametrize("size", [
        pytest.param(quick, id="quick"),
        pytest.param(soak, id="soak", marks=[pytest.mark.soak, pytest.mark.timeout(SOAK_TIMEOUT)]),
    ])


def sized(size: dict[str, Any], store: str) -> dict[str, Any]:
    """``size`` for one store: a ``dynamodb_items`` entry replaces ``items`` on
    DynamoDB (dynalite serves a few hundred writes a second, the others thousands)."""
    plan = {k: v for k, v in size.items() if k != "dynamodb_items"}
    if store == "dynamodb" and "dynamodb_items" in size:
        plan["items"] = size["dynamodb_items"]
    return plan
