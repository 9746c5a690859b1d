"""The issue's targets (20,000 items, batch 25, 4 processes, one run), judged
from the runs. A target whose inputs were not measured is "not measured",
never "met"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.sizes import Sizes
from bench.summary import figures, per_call

BARE_PG = "bare: SKIP LOCKED UPDATE + DELETE"
BARE_REDIS = "bare: one-script pop, no lease"
LOCK = "redis-py Lock per item"
POWERTOOLS = "Powertools Idempotency"
GUARD = "onceonly guard (acquire + complete)"


@dataclass(frozen=True)
class Target:
    goal: str
    measured: str
    met: bool | None  # None: not measured in this run
    profile: str | None = None  # the store whose claim path to profile when missed


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


class _Judge:
    def __init__(self, runs: list[dict[str, Any]], sizes: Sizes) -> None:
        self.runs, self.sizes = runs, sizes
        self.claims = figures(runs, "claims", ("store", "method", "batch", "processes"))
        self.head = (sizes.headline_batch, sizes.headline_processes)

    def claim_rate(self, store: str, method: str = "onceonly") -> float | None:
        figure = self.claims.get((store, method, *self.head))
        return figure.median if figure else None

    def other_rate(self, section: str, method: str | None = None) -> float | None:
        keys = ("method", "processes") if method else ("processes",)
        wanted = (method, self.sizes.headline_processes) if method else (self.sizes.headline_processes,)
        figure = figures(self.runs, section, keys).get(wanted)
        return figure.median if figure else None

    def at_least(self, goal: str, ratio: float | None, floor: float, profile: str | None) -> Target:
        if ratio is None:
            return Target(goal, "not measured", None)
        return Target(goal, f"{ratio:.2f}x", ratio >= floor, profile)

    def backlog_flat(self, store: str) -> Target:
        """Both the claims that take due items and those that find nothing due."""
        goal = f"{_STORE_NAMES[store]} claim cost flat within +-30% from the smallest to the largest backlog"
        ratios = {}
        for value, what in (("claim_ms", "claiming due items"), ("empty_claim_ms", "with nothing due")):
            cost = figures(self.runs, "backlog", ("store", "backlog"), value)
            sizes = sorted(b for s, b in cost if s == store)
            if len(sizes) < 2:
                return Target(goal, "not measured", None)
            ratios[what] = cost[(store, sizes[-1])].median / cost[(store, sizes[0])].median
        text = ", ".join(f"{ratio:.2f}x {what}" for what, ratio in ratios.items())
        return Target(goal, f"cost at {sizes[-1]:,} queued / at {sizes[0]:,}: {text}",
                      all(0.7 <= r <= 1.3 for r in ratios.values()), store)

    def dynamodb_guard(self) -> Target:
        goal = "DynamoDB: no more API calls per record than Powertools Idempotency, at no fewer records/s"
        calls = figures(self.runs, "idempotency", ("method",), "calls_per_record")
        ours, theirs = calls.get((GUARD,)), calls.get((POWERTOOLS,))
        processes = max(self.sizes.idempotency_processes)
        rates = figures(self.runs, "idempotency", ("method", "processes"))
        our_rate, their_rate = rates.get((GUARD, processes)), rates.get((POWERTOOLS, processes))
        if not (ours and theirs and our_rate and their_rate):
            return Target(goal, "not measured", None)
        ratio = our_rate.median / their_rate.median
        return Target(goal, f"{ours.median:.2f} vs {theirs.median:.2f} calls/record; {ratio:.2f}x the records/s",
                      ours.median <= theirs.median and ratio >= 1.0, "dynamodb")

    def round_trips(self, store: str) -> Target:
        goal = f"{_STORE_NAMES[store]}: 1 round trip per claim batch, at most 1 per ack batch, 1 per lease operation"
        batch, processes = self.head
        match = {"store": store, "method": "onceonly", "batch": batch, "processes": processes}
        claim, ack = per_call(self.runs, "claims", "claim", **match), per_call(self.runs, "claims", "ack", **match)
        lease_ops = [per_call(self.runs, "leases", op, store=store) for op in ("acquire", "renew", "release",
                                                                               "complete")]
        if claim is None or None in lease_ops:
            return Target(goal, "not measured", None)
        worst_lease = max(x for x in lease_ops if x is not None)
        lease_text = f"lease operations up to {worst_lease:.2f}"
        if ack is None:  # claim(acks=...): each claim also carries the previous batch's acks
            return Target(goal, f"claim carrying the previous acks {claim:.2f}, {lease_text}",
                          claim <= 2.0 and worst_lease <= 1.0, store)
        return Target(goal, f"claim {claim:.2f}, ack {ack:.2f}, {lease_text}",
                      claim <= 1.0 and ack <= 1.0 and worst_lease <= 1.0, store)

    def replicas(self) -> Target:
        goal = "8 replicas >= 6x the delivery throughput of 1 on the 50 ms receiver"
        rates = figures(self.runs, "replicas", ("replicas",))
        most = max((r for (r,) in rates), default=None)
        if most is None or (1,) not in rates or most == 1:
            return Target(goal, "not measured", None)
        ratio = rates[(most,)].median / rates[(1,)].median
        return Target(goal, f"{ratio:.2f}x at {most} replicas", ratio >= 6.0 if most >= 8 else None)


    def delivery_cost(self) -> Target:
        goal = ("Concurrent delivery >= 3x serial in deliveries/s per replica, Lambda-seconds per delivery "
                "falling as much (200 ms receiver, batch 10)")
        rates = figures(self.runs, "delivery_cost", ("latency_ms", "mode", "replicas"))
        costs = figures(self.runs, "delivery_cost", ("latency_ms", "mode", "replicas"), "lambda_seconds_per_delivery")
        serial, concurrent = (200, "serial", 1), (200, "concurrent", 1)
        if serial not in rates or concurrent not in rates:
            return Target(goal, "not measured", None)
        speedup = rates[concurrent].median / rates[serial].median
        cheaper = costs[serial].median / costs[concurrent].median
        return Target(goal, f"{speedup:.2f}x the deliveries/s, {cheaper:.2f}x fewer Lambda-seconds per delivery",
                      speedup >= 3.0 and cheaper >= 3.0)


_STORE_NAMES = {"postgresql": "PostgreSQL", "redis": "Redis", "dynamodb": "DynamoDB"}


def evaluate(runs: list[dict[str, Any]], sizes: Sizes) -> list[Target]:
    j = _Judge(runs, sizes)
    return [
        j.at_least("PostgreSQL claim + ack >= 0.7x the bare SKIP LOCKED statements",
                   _ratio(j.claim_rate("postgresql"), j.claim_rate("postgresql", BARE_PG)), 0.7, "postgresql"),
        j.at_least("PostgreSQL claim + ack >= 20x procrastinate",
                   _ratio(j.claim_rate("postgresql"), j.other_rate("procrastinate")), 20.0, "postgresql"),
        j.backlog_flat("postgresql"),
        j.at_least("Redis claim + ack >= 0.5x the bare one-script pop",
                   _ratio(j.claim_rate("redis"), j.claim_rate("redis", BARE_REDIS)), 0.5, "redis"),
        j.at_least("Redis claim + ack >= 10x redis-py Lock per item",
                   _ratio(j.claim_rate("redis"), j.claim_rate("redis", LOCK)), 10.0, "redis"),
        j.dynamodb_guard(),
        j.round_trips("postgresql"),
        j.round_trips("redis"),
        j.replicas(),
        j.delivery_cost(),
    ]
