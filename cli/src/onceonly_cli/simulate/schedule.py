"""The ticks a simulated cron job gets: the most recent times its schedule in
template.yaml fired, so a run looks like a real day (today's 02:00 run of a
daily job, the last minutes of a per-minute one). Runs never meet on these
times because each run has a store and a database of its own (run_scope.py).

Understood: ``rate(N minute|minutes|hour|hours|day|days)``, taken as aligned
to the epoch, and ``cron(M H * * ? *)``, a daily time. Anything else falls back
to a daily tick at midnight UTC, which is what the billing jobs assume."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

RATE = re.compile(r"^rate\((\d+)\s+(minute|minutes|hour|hours|day|days)\)$")
DAILY_CRON = re.compile(r"^cron\((\d{1,2})\s+(\d{1,2})\s+\*\s+\*\s+\?\s+\*\)$")
UNITS = {"minute": 60, "hour": 3600, "day": 86400}
FALLBACK = "cron(0 0 * * ? *)"


def recent_ticks(expression: str | None, now: datetime, count: int) -> list[datetime]:
    """The last ``count`` times ``expression`` fired at or before ``now``, oldest
    first, in UTC and whole seconds."""
    now = now.astimezone(UTC).replace(microsecond=0)
    text = (expression or FALLBACK).strip()
    rate = RATE.match(text)
    if rate:
        period = int(rate.group(1)) * UNITS[rate.group(2).rstrip("s")]
        if period > 0:
            last = datetime.fromtimestamp(int(now.timestamp()) // period * period, tz=UTC)
            return [last - timedelta(seconds=period * k) for k in reversed(range(count))]
    daily = DAILY_CRON.match(text) or DAILY_CRON.match(FALLBACK)
    assert daily is not None
    minute, hour = int(daily.group(1)), int(daily.group(2))
    if minute > 59 or hour > 23:
        minute = hour = 0
    last = now.replace(hour=hour, minute=minute, second=0)
    if last > now:
        last -= timedelta(days=1)
    return [last - timedelta(days=k) for k in reversed(range(count))]
