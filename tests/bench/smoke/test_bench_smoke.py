"""The benchmark suite's smoke run (``python -m bench --smoke``): tiny sizes,
one repetition, so the suite cannot rot. It asserts that every section ran and
wrote its tables, charts and raw JSON, and that onceonly handed out every item
exactly once in every run. Never a timing: the machine is shared."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

pytestmark = [pytest.mark.bench, pytest.mark.xdist_group("processes")]  # spawns processes

SECTIONS = ("claims", "leases", "backlog", "procrastinate", "idempotency", "replicas", "delivery_cost")
HEADINGS = ("## Targets", "## Claim + ack, per store", "### PostgreSQL", "### Redis", "### DynamoDB (dynalite)",
            "## Backlog scaling", "## Beside the field's tools", "## Scaling with replicas",
            "## Cost per delivery: serial against concurrent sending", "## Missed targets", "## Method")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="session")  # one run per worker, whatever runs between its tests
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    done = subprocess.run([sys.executable, "-m", "bench", "--smoke", "--out", str(out)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def test_every_section_wrote_runs_to_the_json(smoke_run: Path) -> None:
    result = json.loads((smoke_run / "benchmarks.json").read_text())
    assert {run["section"] for run in result["runs"]} == set(SECTIONS)
    assert result["machine"]["postgresql"] and result["machine"]["redis"]
    assert len(result["targets"]) == 10


def test_onceonly_handed_every_item_out_exactly_once(smoke_run: Path) -> None:
    runs = json.loads((smoke_run / "benchmarks.json").read_text())["runs"]
    ours = [r for r in runs if r["section"] == "claims" and r["method"] == "onceonly"]
    assert {r["store"] for r in ours} == {"postgresql", "redis", "dynamodb"}
    for run in ours:
        assert (run["duplicates"], run["lost"], run["left"]) == (0, 0, 0), run
    assert all(r["exactly_once"] for r in runs if r["section"] in ("replicas", "delivery_cost"))


def test_the_report_has_every_table_and_chart(smoke_run: Path) -> None:
    report = (smoke_run / "benchmarks.md").read_text()
    for heading in HEADINGS:
        assert heading in report
    charts = sorted(smoke_run.glob("bench-*.png"))
    assert [c.name for c in charts] == ["bench-backlog.png", "bench-claims.png", "bench-replicas.png"]
    for chart in charts:
        assert chart.read_bytes().startswith(PNG_MAGIC)
        assert f"]({chart.name})" in report
