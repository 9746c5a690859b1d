"""The benchmark report's verdicts (bench/targets.py): a missed ratio says
MISSED, a figure that was not measured is never "met"."""

from __future__ import annotations

from typing import Any

from bench.sizes import SMOKE
from bench.summary import Figure
from bench.targets import BARE_PG, evaluate

BATCH, PROCESSES = SMOKE.headline_batch, SMOKE.headline_processes


def _claims(store: str, method: str, per_second: float, trips: float = 1.0) -> dict[str, Any]:
    return {"section": "claims", "store": store, "method": method, "batch": BATCH, "processes": PROCESSES,
            "per_second": per_second, "calls": {"claim": 10, "ack": 10},
            "round_trips": {"claim": int(10 * trips), "ack": int(10 * trips)}}


def _leases(store: str, trips_each: int) -> dict[str, Any]:
    kinds = ("acquire", "renew", "release", "complete")
    return {"section": "leases", "store": store, "calls": dict.fromkeys(kinds, 4),
            "round_trips": dict.fromkeys(kinds, 4 * trips_each)}


def _verdicts(runs: list[dict[str, Any]]) -> dict[str, bool | None]:
    return {t.goal: t.met for t in evaluate(runs, SMOKE)}


def test_nothing_measured_is_never_met() -> None:
    assert set(_verdicts([]).values()) == {None}


def test_the_postgresql_ratio_to_the_bare_statements_is_judged_at_0_7() -> None:
    goal = "PostgreSQL claim + ack >= 0.7x the bare SKIP LOCKED statements"
    assert _verdicts([_claims("postgresql", "onceonly", 70), _claims("postgresql", BARE_PG, 100)])[goal] is True
    assert _verdicts([_claims("postgresql", "onceonly", 69), _claims("postgresql", BARE_PG, 100)])[goal] is False


def test_round_trips_above_one_per_call_miss_the_target() -> None:
    leases = _leases("redis", 1)
    goal = "Redis: 1 round trip per claim batch, at most 1 per ack batch, 1 per lease operation"
    assert _verdicts([_claims("redis", "onceonly", 1, trips=1.0), leases])[goal] is True
    assert _verdicts([_claims("redis", "onceonly", 1, trips=2.0), leases])[goal] is False
    assert _verdicts([_claims("redis", "onceonly", 1, trips=1.0), _leases("redis", 2)])[goal] is False


def test_a_claim_carrying_the_previous_acks_may_cost_one_round_trip_for_each() -> None:
    leases = _leases("postgresql", 1)
    goal = "PostgreSQL: 1 round trip per claim batch, at most 1 per ack batch, 1 per lease operation"

    def carried(trips: int) -> dict[str, Any]:
        run = _claims("postgresql", "onceonly", 1)
        return {**run, "calls": {"claim": 10}, "round_trips": {"claim": 10 * trips}, "acks_on_claim": True}

    assert _verdicts([carried(2), leases])[goal] is True
    assert _verdicts([carried(3), leases])[goal] is False


def test_backlog_cost_must_stay_within_30_percent() -> None:
    def probe(backlog: int, ms: float, empty_ms: float = 1.0) -> dict[str, Any]:
        return {"section": "backlog", "store": "postgresql", "backlog": backlog, "claim_ms": ms,
                "empty_claim_ms": empty_ms}

    goal = "PostgreSQL claim cost flat within +-30% from the smallest to the largest backlog"
    assert _verdicts([probe(2000, 1.0), probe(100_000, 1.29)])[goal] is True
    assert _verdicts([probe(2000, 1.0), probe(100_000, 6.0)])[goal] is False
    assert _verdicts([probe(2000, 1.0), probe(100_000, 0.6)])[goal] is False  # flat both ways
    assert _verdicts([probe(2000, 1.0), probe(100_000, 1.0, empty_ms=9.0)])[goal] is False  # nothing due counts


def test_a_figure_is_the_median_with_min_and_max() -> None:
    assert Figure.of([3.0, 1.0, 10.0]) == Figure(median=3.0, low=1.0, high=10.0, runs=3)


def _delivery(mode: str, per_second: float) -> dict[str, Any]:
    return {"section": "delivery_cost", "latency_ms": 200, "mode": mode, "replicas": 1, "per_second": per_second,
            "lambda_seconds_per_delivery": 1 / per_second}


def test_concurrent_delivery_is_judged_at_3x_serial_on_the_200_ms_receiver() -> None:
    goal = next(g for g in _verdicts([]) if g.startswith("Concurrent delivery"))
    assert _verdicts([_delivery("serial", 4.0), _delivery("concurrent", 12.0)])[goal] is True
    assert _verdicts([_delivery("serial", 4.0), _delivery("concurrent", 11.9)])[goal] is False
    assert _verdicts([_delivery("concurrent", 12.0)])[goal] is None  # no serial run: not measured
