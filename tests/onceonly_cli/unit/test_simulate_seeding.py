"""The seeded scenarios mean what the report says they test: the invoice due on
the last overdue tick's local day (the tick of the template's own overdue
schedule) is one a due day judged in UTC would move, in each non-UTC zone, at
every tick hour where any instant of that local day could be; and the paused
schedule's expected count leaves out exactly the periods inside its window."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from onceonly_cli.local.template import schedule_expression
from onceonly_cli.simulate.billing_checks import due_day_end
from onceonly_cli.simulate.billing_load import billed_periods, local_due_at
from onceonly_cli.simulate.schedule import recent_ticks
from onceonly_cli.simulate.tenants import PROFILES
from tests.support import REPO_ROOT

TEMPLATE = REPO_ROOT / "template.yaml"


def utc_day_end(when: datetime) -> datetime:
    """When a due day judged in UTC would end: the UTC midnight after ``when``."""
    return datetime.combine(when.astimezone(UTC).date() + timedelta(days=1), time(), UTC)


@pytest.mark.parametrize("zone", [zone for _, zone, _ in PROFILES if zone != "UTC"])
def test_the_invoice_due_on_the_last_ticks_local_day_would_be_moved_by_a_utc_due_day(zone: str) -> None:
    """At each UTC hour the last tick can fall on: the seeded invoice stays open
    (its due day has not ended in its zone) and a UTC due day would have ended,
    whenever the local day's first instant already has its UTC day ended. At the
    other hours no invoice due that local day could catch a UTC due day (the
    local day began after the tick's UTC day did)."""
    schedule = schedule_expression(TEMPLATE, "OverdueInvoicesFunction")
    caught, catchable = set(), set()
    for hour in range(24):
        rng = random.Random(hour)
        now = datetime(2040, 1, 1, hour, tzinfo=UTC) + timedelta(days=rng.randrange(365), minutes=rng.randrange(60))
        last_tick = recent_ticks(schedule, now, 2)[-1]
        today = last_tick.astimezone(ZoneInfo(zone)).date()
        due_at = local_due_at(zone, today, rng)
        assert due_day_end(due_at, zone) > last_tick  # in the tenant's zone it is still the due day
        if utc_day_end(datetime.combine(today, time(), ZoneInfo(zone))) <= last_tick:
            catchable.add(last_tick.hour)
        if utc_day_end(due_at) <= last_tick:
            caught.add(last_tick.hour)
    assert catchable, f"{schedule}: no tick at which a UTC due day could be caught in {zone}"
    assert caught == catchable, f"{schedule}: the seeded invoice catches nothing at UTC hours {catchable - caught}"


@pytest.mark.parametrize(("pause", "billed"), [
    (None, 6),  # the 1st to the 6th
    ((date(2040, 3, 2), date(2040, 3, 4)), 4),  # the 2nd and 3rd left out
    ((date(2040, 3, 6), date(2040, 3, 9)), 5),  # a window past the last day counts only up to it
    ((date(2040, 2, 1), date(2040, 3, 1)), 6),  # resumed on the anchor: nothing left out
])
def test_billed_periods_leave_out_the_periods_starting_inside_the_pause(
        pause: tuple[date, date] | None, billed: int) -> None:
    assert billed_periods(date(2040, 3, 1), date(2040, 3, 6), pause) == billed
