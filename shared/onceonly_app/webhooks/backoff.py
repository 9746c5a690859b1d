"""When to try again: exponential ceilings with full jitter, and Retry-After.

Full jitter (a uniform draw in [0, ceiling]) spreads the retries of many
deliveries that failed together, e.g. when an endpoint came back up, instead of
sending them all again at the same instant."""

from __future__ import annotations

import email.utils
import random
from collections.abc import Sequence

RETRY_AFTER_STATUSES = frozenset({429, 503})


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date).
    None when absent or unparseable; never negative."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)


class RetryPolicy:
    """``schedule[n]`` is the ceiling of the delay after the (n+1)-th failed attempt."""

    def __init__(self, schedule: Sequence[float], max_retry_after: float,
                 rng: random.Random | None = None) -> None:
        self.schedule = tuple(schedule)
        self.max_retry_after = max_retry_after
        self._rng = rng or random.Random()

    @property
    def max_attempts(self) -> int:
        return 1 + len(self.schedule)

    def next_delay(self, attempts_made: int, retry_after: float | None = None) -> float | None:
        """Seconds until the next attempt after ``attempts_made`` attempts, or None
        when the last attempt has been made (the delivery is dead)."""
        if attempts_made >= self.max_attempts:
            return None
        ceiling = self.schedule[attempts_made - 1]
        delay = self._rng.uniform(0.0, ceiling)
        if retry_after is not None:
            # The endpoint said when it can take more: never earlier than that,
            # but capped so that a hostile value cannot park a delivery forever.
            delay = max(delay, min(retry_after, self.max_retry_after))
        return delay
