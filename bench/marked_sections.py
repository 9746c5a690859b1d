"""A section of docs/benchmarks.md that one benchmark owns, between two marker
lines: written by that benchmark alone, and kept by the full run."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class MarkedSection:
    begin: str
    end: str

    def _pattern(self) -> re.Pattern[str]:
        return re.compile(re.escape(self.begin) + ".*?" + re.escape(self.end), re.DOTALL)

    def replace(self, markdown: str, new: str) -> str:
        """``markdown`` with the section replaced by ``new`` (appended if absent)."""
        if self._pattern().search(markdown):
            return self._pattern().sub(lambda _: new, markdown)
        return markdown.rstrip("\n") + "\n\n" + new + "\n"

    def kept(self, markdown: str) -> str | None:
        """The section of an earlier benchmarks.md, for the full run to keep."""
        found = self._pattern().search(markdown)
        return found.group(0) if found else None
