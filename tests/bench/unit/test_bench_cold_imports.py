"""The cold-import section of docs/benchmarks.md: medians side by side, the
target judged on the compiled figure, and the section replaced in place."""

from __future__ import annotations

from pathlib import Path

from bench import cold_imports


def _runs(handler: str, cold: list[float], compiled: list[float]) -> list[dict[str, object]]:
    return [{"section": "cold_imports", "handler": handler, "mode": mode, "seconds": s, "wall_seconds": 2 * s,
             "load": 1.0} for mode, values in (("cold", cold), ("compiled", compiled)) for s in values]


def test_the_section_puts_both_modes_side_by_side_and_judges_the_compiled_one() -> None:
    runs = [*_runs("webhook_dispatch", [1.0, 1.2, 0.9], [0.4, 0.3, 0.5]),
            *_runs("notifications", [1.5, 1.5, 1.5], [0.6, 0.7, 0.6]), {"section": "claims"}]
    lines = cold_imports.section(runs)
    assert lines[0] == cold_imports.SECTION
    assert "| webhook_dispatch | 1,000 | 400 | 2.50x | yes | 2,000 | 800 |" in lines
    assert "| notifications | 1,500 | 600 | 2.50x | **NO** | 3,000 | 1,200 |" in lines
    assert cold_imports.section([{"section": "claims"}]) == []  # not measured: no section


def test_the_section_is_replaced_in_place(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Missed targets\n\nNone.\n\n## Method\n\n- x\n")
    cold_imports.replace_section(doc, [cold_imports.SECTION, "", "first", ""])
    cold_imports.replace_section(doc, [cold_imports.SECTION, "", "second", ""])
    text = doc.read_text()
    assert text.count(cold_imports.SECTION) == 1 and "second" in text and "first" not in text
    assert text.index(cold_imports.SECTION) < text.index("## Method") and text.endswith("- x\n")
