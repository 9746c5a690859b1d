"""The seeded scenarios mean what the report says they test: the invoice due on
the last overdue tick's local day is one a due day judged in UTC would move,
in both non-UTC zones, and the paused schedule's expected count leaves out
exactly the periods inside its window."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from onceonly_cli.simulate.billing_checks import due_day_end
from onceonly_cli.simulate.billing_load import billed_periods, local_due_at
from onceonly_cli.simulate.schedule import recent_ticks
from onceonly_cli.simulate.tenants import PROFILES


@pytest.mark.parametrize("zone", [zone for _, zone, _ in PROFILES if zone != "UTC"])
@pytest.mark.parametrize("seed", range(20))
def test_the_invoice_due_on_the_last_ticks_local_day_would_be_moved_by_a_utc_due_day(zone: str, seed: int) -> None:
    rng = random.Random(seed)
    now = datetime(2040, 1, 1, tzinfo=UTC) + timedelta(hours=rng.randrange(24 * 365))
    last_tick = recent_ticks("cron(0 2 * * ? *)", now, 2)[-1]  # the template's overdue schedule
    today = last_tick.astimezone(ZoneInfo(zone)).date()
    due_at = local_due_at(zone, today, rng)
    utc_day_end = datetime.combine(due_at.astimezone(UTC).date() + timedelta(days=1), datetime.min.time(), UTC)
    assert utc_day_end <= last_tick, "a UTC due day has not ended either: the scenario would catch nothing"
    assert due_day_end(due_at, zone) > last_tick  # in the tenant's zone it is still the due day


@pytest.mark.parametrize(("pause", "billed"), [
    (None, 6),  # the 1st to the 6th
    ((date(2040, 3, 2), date(2040, 3, 4)), 4),  # the 2nd and 3rd left out
    ((date(2040, 3, 6), date(2040, 3, 9)), 5),  # a window past the last day counts only up to it
    ((date(2040, 2, 1), date(2040, 3, 1)), 6),  # resumed on the anchor: nothing left out
])
def test_billed_periods_leave_out_the_periods_starting_inside_the_pause(
        pause: tuple[date, date] | None, billed: int) -> None:
    assert billed_periods(date(2040, 3, 1), date(2040, 3, 6), pause) == billed
