"""The tenants a simulation seeds: several, each with its own time zone,
currency, receiving account and webhook subscriptions, so that the report can
check that nothing crosses from one tenant to another.

The time zones are chosen to catch a due day judged in UTC: Honolulu
(UTC-10) and Tokyo (UTC+9) both have no daylight saving, so "the due day has
ended" is a fixed offset from UTC every day of the year, and each one's local
date at an hourly overdue run differs from the UTC date in its own way (at
00:00-09:59 UTC in Honolulu, 15:00-23:59 UTC in Tokyo)."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

INSERT_TENANT = "INSERT INTO billing_tenants (tenant_id, time_zone) VALUES (%s, %s)"


@dataclass(frozen=True)
class Tenant:
    id: str
    time_zone: str  # IANA name; "UTC" gets no billing_tenants row (the default)
    currency: str  # of its invoices and schedules


# (suffix, time zone, currency): the run's tenants, in this order.
PROFILES = (("utc", "UTC", "USD"), ("honolulu", "Pacific/Honolulu", "USD"), ("tokyo", "Asia/Tokyo", "EUR"))


def run_tenants(run_id: str) -> list[Tenant]:
    return [Tenant(f"sim-{run_id}-{suffix}", zone, currency) for suffix, zone, currency in PROFILES]


def seed_tenants(conn: psycopg.Connection[object], tenants: list[Tenant]) -> None:
    """A tenant on UTC keeps the default (no row), as most tenants would."""
    for tenant in tenants:
        if tenant.time_zone != "UTC":
            conn.execute(INSERT_TENANT, (tenant.id, tenant.time_zone))
