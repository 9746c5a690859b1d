"""When to try again: each delay of the schedule with bounded jitter, and Retry-After.

Bounded jitter (a uniform draw within ±JITTER of the scheduled delay) spreads
the retries of many deliveries that failed together, e.g. when an endpoint came
back up, instead of sending them all again at the same instant, while the whole
schedule still spans the window it promises: with the default schedule 8
attempts span 24.8-30.3 h (27.6 h nominal), so an endpoint that is down for a
whole day does not dead-letter. Full jitter (a draw in [0, delay]) halved that
window: a median 13.8 h.

Retry-After comes from the endpoint, so its parser accepts only what RFC 9110
allows, caps the result and never raises: one hostile header must not crash the
worker that reads it (it used to, in every worker that claimed the delivery)."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from datetime import UTC, datetime

RETRY_AFTER_STATUSES = frozenset({429, 503})

# RFC 9110 section 10.2.3: Retry-After = HTTP-date / delay-seconds, where
# delay-seconds is 1*DIGIT in ASCII (str.isdigit() also takes "²" or "٣") and an
# HTTP-date is one of the three GMT forms of section 5.6.7. Anything else is ignored.
_DELAY_SECONDS = re.compile(r"[0-9]+", re.ASCII)
_MAX_DIGITS = 12  # more is "longer than any cap"; int() of thousands of digits would raise
_MONTHS = {m: n for n, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}
_DAY_NAMES = "Mon|Tue|Wed|Thu|Fri|Sat|Sun"
_LONG_DAY_NAMES = "Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday"
_MONTH = "|".join(_MONTHS)
_TIME = r"(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})"
_HTTP_DATES = (
    # IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
    re.compile(rf"(?:{_DAY_NAMES}), (?P<day>[0-9]{{2}}) (?P<month>{_MONTH}) (?P<year>[0-9]{{4}}) {_TIME} GMT",
               re.ASCII),
    # obsolete RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
    re.compile(rf"(?:{_LONG_DAY_NAMES}), (?P<day>[0-9]{{2}})-(?P<month>{_MONTH})-(?P<year>[0-9]{{2}}) {_TIME} GMT",
               re.ASCII),
    # obsolete asctime: Sun Nov  6 08:49:37 1994
    re.compile(rf"(?:{_DAY_NAMES}) (?P<month>{_MONTH}) (?P<day>[ 0-9][0-9]) {_TIME} (?P<year>[0-9]{{4}})",
               re.ASCII),
)


def parse_retry_after(value: str | None, now: float, cap: float) -> float | None:
    """Seconds to wait from a Retry-After header value, at most ``cap``; None when
    the header is absent or not valid per RFC 9110. Never raises, never negative."""
    if not value:
        return None
    text = value.strip(" \t")
    if _DELAY_SECONDS.fullmatch(text):
        return cap if len(text) > _MAX_DIGITS else min(float(int(text)), cap)
    when = _http_date(text, now)
    return None if when is None else min(max(0.0, when - now), cap)


def _http_date(text: str, now: float) -> float | None:
    """The epoch time of an HTTP-date, or None if ``text`` is not one."""
    for form in _HTTP_DATES:
        match = form.fullmatch(text)
        if match is None:
            continue
        year = int(match["year"])
        if len(match["year"]) == 2:
            # RFC 9110: a two-digit year more than 50 years ahead is in the past century.
            this_year = datetime.fromtimestamp(now, UTC).year
            year += this_year // 100 * 100
            if year > this_year + 50:
                year -= 100
        try:
            when = datetime(year, _MONTHS[match["month"]], int(match["day"]), int(match["hour"]),
                            int(match["minute"]), int(match["second"]), tzinfo=UTC)
        except ValueError:  # Feb 30, hour 25, year 0
            return None
        return when.timestamp()
    return None


JITTER = 0.1  # each delay is drawn in [delay x (1 - JITTER), delay x (1 + JITTER)]


class RetryPolicy:
    """``schedule[n]`` is the delay after the (n+1)-th failed attempt, ±JITTER."""

    def __init__(self, schedule: Sequence[float], max_retry_after: float,
                 rng: random.Random | None = None) -> None:
        self.schedule = tuple(schedule)
        self.max_retry_after = max_retry_after
        self._rng = rng or random.Random()

    @property
    def max_attempts(self) -> int:
        return 1 + len(self.schedule)

    @property
    def longest_delay(self) -> float:
        """The longest delay the schedule can draw (Retry-After aside)."""
        return max(self.schedule) * (1 + JITTER)

    def next_delay(self, attempts_made: int, retry_after: float | None = None) -> float | None:
        """Seconds until the next attempt after ``attempts_made`` attempts, or None
        when the last attempt has been made (the delivery is dead)."""
        if attempts_made >= self.max_attempts:
            return None
        nominal = self.schedule[attempts_made - 1]
        delay = self._rng.uniform(nominal * (1 - JITTER), nominal * (1 + JITTER))
        if retry_after is not None:
            # The endpoint said when it can take more: never earlier than that,
            # but capped so that a hostile value cannot park a delivery forever.
            delay = max(delay, min(retry_after, self.max_retry_after))
        return delay
