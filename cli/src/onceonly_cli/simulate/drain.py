"""When simulate stops waiting: when all work is finished, or when nothing has
moved for ``stall_limit`` seconds, or at the hard ``time_limit``.

Waiting on progress rather than on a fixed wall clock lets a loaded machine
take as long as it needs, while a run where something is really stuck still
ends: the stall limit is longer than any lease, retry delay or replica restart
the simulation configures, so work that makes no progress for that long is
stuck, not slow."""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import dataclass, field


@dataclass
class DrainWatch:
    stall_limit: float
    time_limit: float
    started: float = field(default_factory=time.monotonic)
    _last_seen: Hashable = None
    _last_progress: float = 0.0
    reason: str = ""  # why the wait ended: drained | stalled | time limit

    def __post_init__(self) -> None:
        self._last_progress = self.started

    def observe(self, progress: Hashable, *, finished: bool) -> bool:
        """Record the current progress signature; True when the wait is over."""
        now = time.monotonic()
        if progress != self._last_seen:
            self._last_seen = progress
            self._last_progress = now
        if finished:
            self.reason = "drained"
        elif now - self._last_progress >= self.stall_limit:
            self.reason = "stalled"
        elif now - self.started >= self.time_limit:
            self.reason = "time limit"
        return bool(self.reason)

    @property
    def drained(self) -> bool:
        return self.reason == "drained"

    def detail(self) -> str:
        """The "drained" invariant's detail line."""
        if self.reason == "drained":
            return "all work finished"
        if self.reason == "stalled":
            return f"work left, and nothing progressed for {self.stall_limit:g} s"
        return f"work still progressing at the {self.time_limit:g} s time limit"
