"""Powertools Metrics print EMF JSON to stdout; in a replica, stdout is this
writer: metric values are summed for the report, every line goes to the log."""

from __future__ import annotations

import json
import threading
from collections import Counter
from typing import Any, TextIO


def emf_values(line: str) -> dict[str, float]:
    """Metric name -> summed value of one EMF line; empty for anything else."""
    if '"_aws"' not in line:
        return {}
    try:
        blob = json.loads(line)
        directives = blob["_aws"]["CloudWatchMetrics"]
    except (ValueError, KeyError, TypeError):
        return {}
    values: dict[str, float] = {}
    for directive in directives:
        for metric in directive.get("Metrics", []):
            name = metric.get("Name")
            raw: Any = blob.get(name)
            numbers = raw if isinstance(raw, list) else [raw]
            total = sum(float(n) for n in numbers if isinstance(n, int | float))
            values[name] = values.get(name, 0.0) + total
    return values


class MetricsCapturingStdout:
    """A text stream: forwards writes to ``log`` and sums EMF metrics by name."""

    def __init__(self, log: TextIO) -> None:
        self._log = log
        self._partial = ""
        self._lock = threading.Lock()
        self.metrics: Counter[str] = Counter()

    def write(self, text: str) -> int:
        with self._lock:
            self._log.write(text)
            self._partial += text
            *lines, self._partial = self._partial.split("\n")
            for line in lines:
                self.metrics.update(emf_values(line))
        return len(text)

    def flush(self) -> None:
        self._log.flush()

    def take(self) -> dict[str, float]:
        """The metrics summed since the last take()."""
        with self._lock:
            taken: dict[str, float] = dict(self.metrics)
            self.metrics.clear()
        return taken

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._log.fileno()
