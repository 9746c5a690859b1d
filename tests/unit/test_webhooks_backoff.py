"""Exponential ceilings with full jitter, the end of the schedule, Retry-After."""

from __future__ import annotations

import email.utils
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


@pytest.mark.parametrize(
    ("value", "expected"),
    [("120", 120.0), ("0", 0.0), (None, None), ("", None), ("soon", None), ("-5", None)],
)
def test_parse_retry_after_seconds(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, now=1_000_000.0) == expected


def test_parse_retry_after_http_date() -> None:
    now = 1_700_000_000.0
    header = email.utils.formatdate(now + 90, usegmt=True)
    assert parse_retry_after(header, now) == pytest.approx(90, abs=1)
    assert parse_retry_after(email.utils.formatdate(now - 90, usegmt=True), now) == 0.0
