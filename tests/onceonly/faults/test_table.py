"""The renderer of docs/reliability.md's table: every figure from the results file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.onceonly.faults.table import END, START, main

RESULT = {"scenario": "random crash", "store": "redis", "processes": 16, "items": 20000, "ticks": 60,
          "faults": {"SIGKILL": 400}, "self_kills": 37, "kills_by_phase": {"mid-claim": 12, "mid-POST": 300},
          "duplicates": 0, "repeats": 41, "lost": 0, "stale_accepted": 0, "longest_stall": 2.345,
          "recorded_at": "2026-12-01T05:31:00+00:00"}


def test_the_table_is_rendered_between_the_markers_from_the_results(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    later = {**RESULT, "store": "dynamodb", "lost": 3, "recorded_at": "2026-12-01T05:44:00+00:00"}
    results.write_text(json.dumps(RESULT) + "\n" + json.dumps(later) + "\n")
    doc = tmp_path / "reliability.md"
    doc.write_text(f"# Reliability\n\nbefore\n\n{START}\nold table\n{END}\n\nafter\n")
    main([str(results), str(doc), "--command", "scripts/soak"])
    text = doc.read_text()
    assert "old table" not in text and text.startswith("# Reliability\n\nbefore\n") and text.endswith("after\n")
    assert "Run on 2026-12-01 with `scripts/soak`" in text and "from 05:31 to 05:44 UTC" in text
    assert ("| random crash | redis | 16 | 20000 + 60 ticks | 437 SIGKILL, where: mid-POST 300, mid-claim 12 "
            "| 0 (+41 webhooks resent with their own key) | 0 | 0 | 2.3 s |") in text
    assert "| random crash | dynamodb | 16 | 20000 + 60 ticks |" in text and "| 3 | 0 | 2.3 s |" in text


def test_a_document_without_the_markers_is_refused(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps(RESULT) + "\n")
    doc = tmp_path / "reliability.md"
    doc.write_text("# Reliability\n")
    with pytest.raises(SystemExit, match="markers"):
        main([str(results), str(doc), "--command", "scripts/soak"])
    assert doc.read_text() == "# Reliability\n"
