"""Each scheduled delay with bounded jitter, the window the schedule spans, the
end of the schedule, Retry-After."""

from __future__ import annotations

import random
import statistics

import pytest

from onceonly_app.webhooks.backoff import JITTER, RetryPolicy, parse_retry_after
from onceonly_app.webhooks.config import DEFAULT_SCHEDULE

HOUR = 3600.0
SAMPLES = 10_000  # sampled schedules, from a fixed seed: the same draws on every run


def _spans(seed: int) -> list[float]:
    """Seconds from the first attempt to the last, for SAMPLES deliveries that fail every attempt."""
    policy = RetryPolicy(DEFAULT_SCHEDULE, max_retry_after=36000, rng=random.Random(seed))
    spans = []
    for _ in range(SAMPLES):
        delays = [policy.next_delay(made) for made in range(1, policy.max_attempts)]
        assert policy.next_delay(policy.max_attempts) is None
        spans.append(sum(d for d in delays if d is not None))
    return spans


def test_each_delay_is_jittered_within_its_bounds_and_spreads() -> None:
    policy = RetryPolicy([5, 300, 1800], max_retry_after=3600, rng=random.Random(7))
    for attempts_made, nominal in [(1, 5), (2, 300), (3, 1800)]:
        delays = [policy.next_delay(attempts_made) for _ in range(2000)]
        assert all(d is not None and nominal * (1 - JITTER) <= d <= nominal * (1 + JITTER) for d in delays)
        # the draws cover the band, not one point: retries that failed together come back spread out
        assert min(delays) < nominal * (1 - JITTER / 2) and max(delays) > nominal * (1 + JITTER / 2)  # type: ignore[operator]
    assert policy.longest_delay == pytest.approx(1800 * (1 + JITTER))


def test_the_default_schedule_spans_the_day_and_a_half_the_docs_promise() -> None:
    """docs/webhooks.md: 8 attempts over about a day and a half (27.6 h nominal). Full
    jitter gave a median of 13.8 h (10th percentile 8.0 h)."""
    nominal = sum(DEFAULT_SCHEDULE)
    assert nominal / HOUR == pytest.approx(27.6, abs=0.05)
    spans = _spans(seed=18)
    assert statistics.median(spans) == pytest.approx(nominal, rel=0.01)
    deciles = statistics.quantiles(spans, n=10)
    assert deciles[0] > 0.95 * nominal and deciles[-1] < 1.05 * nominal
    assert nominal * (1 - JITTER) <= min(spans) and max(spans) <= nominal * (1 + JITTER)


def test_an_endpoint_down_for_24_hours_does_not_dead_letter() -> None:
    """Every sampled schedule still has an attempt after 24 h of failures (full
    jitter dead-lettered 99.5 % of them), and after 12 h, of course."""
    spans = _spans(seed=24)
    assert min(spans) > 24 * HOUR
    assert sum(span <= 12 * HOUR for span in spans) == 0


def test_no_delay_after_the_last_attempt() -> None:
    policy = RetryPolicy([1, 1], max_retry_after=10)
    assert policy.max_attempts == 3
    assert policy.next_delay(2) is not None
    assert policy.next_delay(3) is None


def test_retry_after_is_a_floor_with_a_cap() -> None:
    policy = RetryPolicy([0.5], max_retry_after=60, rng=random.Random(1))
    assert policy.next_delay(1, retry_after=30) == 30
    assert policy.next_delay(1, retry_after=10_000) == 60


NOW = 1_700_000_000.0  # Tue, 14 Nov 2023 22:13:20 GMT
CAP = 3600.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0), ("0", 0.0), (" 7\t", 7.0), ("007", 7.0),
        (None, None), ("", None), ("soon", None), ("-5", None), ("1.5", None), ("+5", None), ("1e3", None),
        ("5 5", None), ("0x10", None),
        # str.isdigit() says yes to these; RFC 9110's delay-seconds is ASCII digits only
        ("\u00b2", None), ("\u0663", None), ("\uff15", None), ("1\u00b2", None),
        ("99999", CAP), ("9" * 5000, CAP),  # capped; thousands of digits do not reach int()
    ],
)
def test_parse_retry_after_seconds(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, NOW, CAP) == expected


@pytest.mark.parametrize(
    "value",
    [
        "Tue, 14 Nov 2023 22:14:50 GMT",  # IMF-fixdate
        "Tuesday, 14-Nov-23 22:14:50 GMT",  # obsolete RFC 850 form, two-digit year
        "Tue Nov 14 22:14:50 2023",  # obsolete asctime form
    ],
)
def test_parse_retry_after_accepts_the_three_http_date_forms(value: str) -> None:
    assert parse_retry_after(value, NOW, CAP) == 90.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Tue, 14 Nov 2023 22:11:50 GMT", 0.0),  # in the past: now
        ("Sat, 01 Jan 2050 00:00:00 GMT", CAP),  # far ahead: capped
        ("Tuesday, 14-Nov-74 22:14:50 GMT", 0.0),  # 2074 is > 50 years ahead: 1974
        ("Tuesday, 14-Nov-72 22:14:50 GMT", CAP),  # 2072 is not
        ("Tue, 14 Nov 2023 22:14:50 +0000", None),  # not GMT: not an HTTP-date
        ("Tue, 14 Nov 2023 22:14:50", None),
        ("14 Nov 2023 22:14:50 GMT", None),
        ("Tue, 31 Feb 2023 22:14:50 GMT", None),  # no such day
        ("Tue, 14 Nov 2023 25:14:50 GMT", None),
        ("Tue, 14 Nov 0000 22:14:50 GMT", None),  # year 0 does not exist
        ("Tue, 14 Nov 2023 22:14:60 GMT", None),
        ("Xyz, 14 Nov 2023 22:14:50 GMT", None),
    ],
)
def test_parse_retry_after_http_date_edges(value: str, expected: float | None) -> None:
    assert parse_retry_after(value, NOW, CAP) == expected


def test_parse_retry_after_never_raises() -> None:
    """Random junk built from the characters that broke or could break a parser:
    digits of other scripts, separators, date words, huge runs of digits."""
    rng = random.Random(12)
    alphabet = ["0", "9", " ", ",", ":", "-", "+", ".", "e", "GMT", "Tue", "Nov", "\u00b2", "\u0663", "\x00",
                "\U0001f600", "9" * 40, "Tue, 14 Nov 2023 22:14:50 GMT"]
    for _ in range(5000):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))
        result = parse_retry_after(value, NOW, CAP)
        assert result is None or 0.0 <= result <= CAP
