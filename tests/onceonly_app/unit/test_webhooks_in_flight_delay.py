"""The delay of a delivery the in-flight cap held back: doubling with each
time, each wait longer than the one before, up to 30 s or a permit's ttl,
whichever is less (within its ttl every permit held at the refusal frees)."""

from __future__ import annotations

import random

import pytest

from onceonly_app.webhooks.endpoint_limits import IN_FLIGHT_DELAY, EndpointGate


class Lowest(random.Random):
    """No jitter: the delay's floor."""

    def uniform(self, a: float, b: float) -> float:
        return a


def delays(permit_ttl: float, rng: random.Random, times: int = 12) -> list[float]:
    gate = EndpointGate(None, None, permit_ttl, rng=rng)  # type: ignore[arg-type]
    return [gate.in_flight_delay(deferrals) for deferrals in range(times)]


@pytest.mark.parametrize(("permit_ttl", "cap"), [(2.8, 2.8), (18.0, 18.0), (120.0, IN_FLIGHT_DELAY[1])])
def test_the_delay_doubles_up_to_the_permits_ttl_or_30_seconds(permit_ttl: float, cap: float) -> None:
    seen = delays(permit_ttl, Lowest())
    assert seen[:4] == pytest.approx([0.2, 0.4, 0.8, 1.6])
    assert max(seen) == pytest.approx(cap) and seen[-1] == pytest.approx(cap)
    assert all(b > a or b == pytest.approx(cap) for a, b in zip(seen, seen[1:], strict=False))


def test_with_jitter_each_wait_is_longer_than_the_one_before_until_the_cap() -> None:
    rng = random.Random(3)
    for _ in range(200):
        seen = delays(18.0, rng, times=7)  # 0.2 x 2^6 = 12.8 s: still below the cap
        assert all(b > a for a, b in zip(seen, seen[1:], strict=False)), seen
        assert max(seen) <= 18.0 * 1.5
