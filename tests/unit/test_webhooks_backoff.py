"""Exponential ceilings with full jitter, the end of the schedule, Retry-After."""

from __future__ import annotations

import random

import pytest

from onceonly_app.webhooks.backoff import RetryPolicy, parse_retry_after


def test_full_jitter_stays_under_each_ceiling_and_spreads() -> None:
    policy = RetryPolicy([5, 300, 1800], max_retry_after=3600, rng=random.Random(7))
    for attempts_made, ceiling in [(1, 5), (2, 300), (3, 1800)]:
        delays = [policy.next_delay(attempts_made) for _ in range(200)]
        assert all(d is not None and 0 <= d <= ceiling for d in delays)
        # full jitter: the draws cover the range, not one point
        assert min(delays) < ceiling * 0.2 and max(delays) > ceiling * 0.8  # type: ignore[operator]


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
