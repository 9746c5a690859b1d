"""Runs -> figures: the median of the repetitions with their min and max."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Figure:
    median: float
    low: float
    high: float
    runs: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Figure:
        values = list(values)
        return cls(statistics.median(values), min(values), max(values), len(values))


def figures(runs: list[dict[str, Any]], section: str, keys: tuple[str, ...],
            value: str = "per_second") -> dict[tuple[Any, ...], Figure]:
    """One figure per distinct ``keys`` among the runs of ``section``."""
    grouped: dict[tuple[Any, ...], list[float]] = defaultdict(list)
    for run in runs:
        if run["section"] == section:
            grouped[tuple(run[k] for k in keys)].append(float(run[value]))
    return {key: Figure.of(values) for key, values in grouped.items()}


def worst(runs: list[dict[str, Any]], section: str, field: str, **match: Any) -> int:
    """The largest ``field`` (duplicates, lost, ...) among matching runs: a bad
    run is never hidden behind a median."""
    values = [int(r.get(field, 0)) for r in runs
              if r["section"] == section and all(r.get(k) == v for k, v in match.items())]
    return max(values, default=0)


def per_call(runs: list[dict[str, Any]], section: str, kind: str, **match: Any) -> float | None:
    """Round trips per call of ``kind`` (claim, ack, ...), over every matching run."""
    calls = trips = 0
    for r in runs:
        if r["section"] == section and all(r.get(k) == v for k, v in match.items()):
            calls += r["calls"].get(kind, 0)
            trips += r["round_trips"].get(kind, 0)
    return trips / calls if calls else None
