"""What the benchmark scripts share: the process counts, the median-of-runs
summary and the ratio cells of their markdown tables."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path

PROCESS_COUNTS = (1, 4, 8)

Cell = dict[str, float]


def median_of_runs(run: Callable[[], Cell], repeat: int) -> Cell:
    """Run ``repeat`` times: the median ``per_second``, and the worst (largest)
    of every other count (duplicates, lost, ...), so a bad run is never hidden."""
    runs = [run() for _ in range(repeat)]
    summary = {key: float(max(r[key] for r in runs)) for key in runs[0] if key != "per_second"}
    summary["per_second"] = statistics.median(r["per_second"] for r in runs)
    return summary


def ratio_cells(cells: dict[int, Cell], base: float) -> str:
    """``1,234 (x1.50)`` per process count: the rate and its ratio to ``base``."""
    return " | ".join(f"{cells[p]['per_second']:,.0f} (x{cells[p]['per_second'] / base:.2f})"
                      for p in PROCESS_COUNTS)


def worst(cells: dict[int, Cell], key: str) -> int:
    return int(max(cells[p][key] for p in PROCESS_COUNTS))


def publish(table: str, out: Path | None) -> None:
    print(table)
    if out:
        out.write_text(table, encoding="utf-8")
