"""How values travel to and from the scripts: durations and times as whole
milliseconds, replies as text."""

from __future__ import annotations

import math


def milliseconds(seconds: float) -> int:
    """Durations travel as whole milliseconds, rounded up so a tiny positive ttl
    never becomes 0 (which would grant an already-expired lease)."""
    return max(1, math.ceil(seconds * 1000))


def epoch_ms(seconds: float) -> int:
    return math.floor(seconds * 1000)


def seconds(milliseconds: int | bytes | str) -> float:
    return int(milliseconds) / 1000.0


def text(value: bytes | str | None) -> str | None:
    """Replies are bytes unless the injected client decodes responses."""
    return value.decode() if isinstance(value, bytes) else value
