"""simulate's ticks look like a real day: the last times each job's schedule in
template.yaml fired, not dates far in the future."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from onceonly_cli.local.template import schedule_expression
from onceonly_cli.simulate.functions import CRON_JOBS, simulated_functions
from onceonly_cli.simulate.runner import cron_ticks
from onceonly_cli.simulate.schedule import recent_ticks
from tests.support import REPO_ROOT

TEMPLATE = REPO_ROOT / "template.yaml"
NOW = datetime(2026, 12, 1, 10, 7, 42, 123456, tzinfo=UTC)


@pytest.mark.parametrize(("expression", "now", "expected"), [
    ("cron(0 2 * * ? *)", NOW, ["2026-11-30T02:00:00", "2026-12-01T02:00:00"]),
    ("cron(0 2 * * ? *)", NOW.replace(hour=1), ["2026-11-29T02:00:00", "2026-11-30T02:00:00"]),
    ("cron(30 0 * * ? *)", NOW, ["2026-11-30T00:30:00", "2026-12-01T00:30:00"]),
    ("rate(5 minutes)", NOW, ["2026-12-01T10:00:00", "2026-12-01T10:05:00"]),
    ("rate(1 minute)", NOW, ["2026-12-01T10:06:00", "2026-12-01T10:07:00"]),
    ("rate(1 hour)", NOW, ["2026-12-01T09:00:00", "2026-12-01T10:00:00"]),
    ("rate(1 day)", NOW, ["2026-11-30T00:00:00", "2026-12-01T00:00:00"]),
    # Not understood: a daily tick at midnight, what the billing jobs assume.
    ("cron(0/15 * * * ? *)", NOW, ["2026-11-30T00:00:00", "2026-12-01T00:00:00"]),
    (None, NOW, ["2026-11-30T00:00:00", "2026-12-01T00:00:00"]),
])
def test_recent_ticks_are_the_last_times_the_schedule_fired(
        expression: str | None, now: datetime, expected: list[str]) -> None:
    ticks = recent_ticks(expression, now, 2)
    assert [t.strftime("%Y-%m-%dT%H:%M:%S") for t in ticks] == expected
    assert all(t.tzinfo == UTC and t <= now for t in ticks)


def test_every_simulated_job_ticks_on_its_template_schedule_within_the_last_two_days() -> None:
    specs = simulated_functions(TEMPLATE)
    now = datetime.now(UTC)
    ticks = cron_ticks(specs, now)
    assert set(ticks) == set(CRON_JOBS.values())
    for function, job in CRON_JOBS.items():
        assert schedule_expression(TEMPLATE, function) is not None, f"{function} has no schedule in the template"
        first, second = ticks[job]
        assert now - timedelta(days=2) <= first < second <= now, (job, ticks[job])
