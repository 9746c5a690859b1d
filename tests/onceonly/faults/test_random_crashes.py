"""Scenario 1: workers SIGKILLed at random points (mid-claim, mid-POST, after the
POST before the ack, mid-transaction), restarted, until every item and tick is
done. Every item is delivered and acked; a webhook repeats only with its own
key, after its first sender died before the ack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.onceonly.faults.harness import Crash, Plan, assert_sound, record, run
from tests.onceonly.faults.sizes import sized, sizes

QUICK = {"processes": 3, "items": 120, "dynamodb_items": 60, "ticks": 4, "faults": 6,
         "die_after_effect": 0.01, "die_in_call": 0.005}
SOAK = {"processes": 16, "items": 20000, "dynamodb_items": 2000, "ticks": 40, "faults": 150,
        "die_after_effect": 0.003, "die_in_call": 0.002, "deadline": 1400.0}


@pytest.mark.concurrency
@sizes(QUICK, SOAK)
def test_random_crashes(store_url: str, size: dict[str, Any], tmp_path: Path) -> None:
    store = store_url.split(":")[0].replace("postgresql", "postgres")
    plan = Plan(scenario="random crash", store=store, url=store_url, first_death=True, **sized(size, store))
    result = run(plan, tmp_path, Crash())
    record(result)
    assert_sound(result)
    # w0.1 died between its first POST and the ack: that webhook went out again, same key.
    assert result["repeats"] > 0, "no webhook was repeated: no crash fell between a POST and its ack"
