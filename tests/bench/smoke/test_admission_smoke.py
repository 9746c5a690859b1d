"""The endpoint admission benchmark's smoke run (``python -m bench.admission
--smoke``): every store, method and cap measured, and the store calls per
attempt it counts are the ones each admission makes (those are counts, not
timings: the machine is shared)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.admission import SMOKE, STORES, held_counts
from tests.support import REPO_ROOT

pytestmark = [pytest.mark.bench, pytest.mark.xdist_group("processes")]  # spawns processes


@pytest.fixture(scope="session")
def admission_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("admission")
    done = subprocess.run([sys.executable, "-m", "bench.admission", "--smoke", "--out", str(out)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def test_the_semaphore_costs_one_call_to_admit_and_one_to_release_at_every_cap(admission_run: Path) -> None:
    calls = json.loads((admission_run / "benchmarks-admission.json").read_text())["calls"]
    for store in STORES:
        for cap in SMOKE.caps:
            semaphore, scan = calls[f"{store}|{cap}|semaphore"], calls[f"{store}|{cap}|slot scan"]
            for state in held_counts(cap):
                admitted = state != "full"
                assert semaphore[state] == {"calls": 2.0 if admitted else 1.0, "admitted": float(admitted)}, state
                assert scan[state]["admitted"] == float(admitted), state
            assert scan["full"]["calls"] == cap  # the scan tries every slot before it refuses
            assert 2 <= scan["cap - 1 held"]["calls"] <= cap + 1


def test_the_section_is_written(admission_run: Path) -> None:
    report = (admission_run / "benchmarks.md").read_text()
    assert report.count("<!-- admission:begin -->") == 1 and "## Endpoint admission" in report
    rates = json.loads((admission_run / "benchmarks-admission.json").read_text())["rates"]
    assert all(state["per_s"] > 0 for figures in rates.values() for state in figures.values())
