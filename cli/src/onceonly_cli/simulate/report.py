"""The simulation's verdict: the exactly-once invariants, checked from what the
receiver saw, what the databases hold and what each invocation answered, the
domain invariants of the seeded scenarios (payment_checks.py,
webhook_checks.py, billing_checks.py), plus the numbers for the charts. A
report is plain JSON-able data."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

BUCKET_SECONDS = 1.0
INVARIANT_BROKEN = 3  # the exit code of a run whose report is not ok
LATENCY_BINS = 20


@dataclass(frozen=True)
class Report:
    """What simulate.run returns: one run's report, or with ``--store all`` the
    comparison of one run per store (``comparison``), as JSON-able ``data``."""

    data: dict[str, Any]
    comparison: bool = False

    @property
    def ok(self) -> bool:
        """Every invariant held (in every run compared)."""
        return bool(self.data["ok"])

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else INVARIANT_BROKEN

    def html(self) -> str:
        """A self-contained HTML page with charts."""
        from .html_report import render_comparison_html, render_html

        return (render_comparison_html if self.comparison else render_html)(self.data)

    def print(self, console: Console) -> None:
        """Tables for a terminal."""
        from .comparison import print_comparison
        from .report_text import print_report

        (print_comparison if self.comparison else print_report)(self.data, console)


@dataclass
class DeliveryFacts:
    """What the run produced on the webhook side, before judging it."""

    events_in: int  # distinct (webhook_id, event_id) fed
    messages_sent: int  # SQS messages, duplicates and redeliveries included
    duplicate_messages: int  # deliberate duplicates among them
    expected_ids: set[str]  # the delivery (webhook-)ids the events must produce
    statuses: dict[str, str]  # delivery id -> status in the domain database
    accepted: Counter[str]  # webhook-id -> requests the receiver answered 2xx
    requests: int  # every request the receiver got whole (and handed to its endpoint)
    cut_attempts: int  # requests their sender cut mid-body (killed mid-POST): never seen by the endpoint
    unverified: int  # requests whose signature did not verify
    first_sent: dict[str, float]  # delivery id -> when its event was first fed
    first_accepted: dict[str, float]  # delivery id -> when the receiver first answered 2xx
    fenced_refused: int  # outcome writes refused by the fence (webhook_attempts.recorded = false)
    sqs_redriven: int  # messages parked in the dead-letter queue during the run, redriven at its end
    sqs_parked: int  # messages in the dead-letter queue after that redrive (malformed ones belong there)
    parked_ids: set[str] = field(default_factory=set)  # expected deliveries whose messages are all parked
    ordinary_ids: set[str] = field(default_factory=set)  # the --events deliveries, scenario ones not included


@dataclass
class TickFacts:
    job: str
    tick: str
    deliveries: int  # invocations of this tick (duplicates included)
    statuses: Counter[str]  # ran / skipped / superseded / crashed / error
    effects: dict[str, int] = field(default_factory=dict)  # measured for this tick
    completed: bool = False  # the store holds the tick's lock as completed (a run finished it)
    final_token: int | None = None  # the lock's token at the end: its newest grant
    tokens: list[tuple[str, int]] = field(default_factory=list)  # (status, token) of runs that answered

    def ran_once(self) -> bool:
        """Exactly one run finished the tick, and every run that lost its lease
        lost it to a newer grant (a higher token), never to a second holder of the
        same grant. A run that completed the tick and was killed before it answered
        leaves no "ran" reply, only the completed lock."""
        ran = [token for status, token in self.tokens if status == "ran"]
        superseded = [token for status, token in self.tokens if status == "superseded"]
        if not self.completed or self.final_token is None or len(ran) > 1:
            return False
        if any(token >= self.final_token for token in superseded):
            return False  # superseded, yet nobody was granted the tick after it
        if ran:
            return ran[0] == self.final_token
        return self.statuses.get("crashed", 0) > 0


@dataclass
class EffectCheck:
    job: str
    what: str
    expected: int
    actual: int

    @property
    def ok(self) -> bool:
        return self.expected == self.actual


@dataclass
class InvocationFacts:
    replica: int
    function: str
    finished: float
    crashed: bool
    ok: bool
    metrics: dict[str, float]


MAX_CASES = 200  # failing cases an invariant keeps for the report (its detail names the first few)


@dataclass
class Invariant:
    name: str
    ok: bool
    detail: str
    cases: list[str] = field(default_factory=list)  # every failing case (up to MAX_CASES): kept in the report

    def __post_init__(self) -> None:
        self.cases = list(self.cases[:MAX_CASES])


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def _histogram(values: list[float], bins: int = LATENCY_BINS) -> list[dict[str, float]]:
    if not values:
        return []
    low, high = min(values), max(values)
    width = (high - low) / bins or 1e-3
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - low) / width))] += 1
    return [{"from_ms": round((low + i * width) * 1000, 2), "to_ms": round((low + (i + 1) * width) * 1000, 2),
             "count": c} for i, c in enumerate(counts)]


def _timeline(first_accepted: dict[str, float], invocations: list[InvocationFacts], start: float,
              replicas: int) -> dict[str, Any]:
    """Deliveries per second overall (first 2xx at the receiver) and per replica
    (the deliveries_succeeded metric of the invocations each replica finished)."""
    last = max([*first_accepted.values(), *(i.finished for i in invocations), start])
    buckets = max(1, math.ceil((last - start) / BUCKET_SECONDS))
    total = [0] * buckets
    per_replica = [[0] * buckets for _ in range(replicas)]
    for t in first_accepted.values():
        total[min(buckets - 1, int((t - start) / BUCKET_SECONDS))] += 1
    for inv in invocations:
        value = int(inv.metrics.get("deliveries_succeeded", 0))
        if value and 0 <= inv.replica < replicas:
            per_replica[inv.replica][min(buckets - 1, max(0, int((inv.finished - start) / BUCKET_SECONDS)))] += value
    return {"bucket_seconds": BUCKET_SECONDS, "total": total, "per_replica": per_replica}


def _ordinary(d: DeliveryFacts) -> dict[str, Any]:
    """Throughput of the --events deliveries alone: from the first one fed to the
    last one's first 2xx. The run's duration also holds waits no replica count
    shortens (the clamped Retry-After, the trickle cut at its deadline, the cron
    jobs one after another and the invoice.paid events the last ones send), so
    only this span shows how delivery scales with replicas."""
    sent = [d.first_sent[i] for i in d.ordinary_ids if i in d.first_sent]
    accepted = [d.first_accepted[i] for i in d.ordinary_ids if i in d.first_accepted]
    if not sent or not accepted:
        return {"deliveries": 0, "seconds": None, "per_second": None}
    span = max(max(accepted) - min(sent), 1e-9)
    return {"deliveries": len(accepted), "seconds": round(span, 3), "per_second": round(len(accepted) / span, 2)}


def build_report(*, config: dict[str, Any], started: float, finished: float, replicas: int,
                 deliveries: DeliveryFacts, ticks: list[TickFacts], effects: list[EffectCheck],
                 invocations: list[InvocationFacts], kills: int, restarts: int,
                 drained: bool, drain_detail: str, payments: list[EffectCheck] | None = None,
                 paid_ids: set[str] | None = None, domain: list[Invariant] | None = None,
                 scenarios: dict[str, Any] | None = None, posts_per_kill: int = 1) -> dict[str, Any]:
    """``posts_per_kill``: the POSTs one replica has in flight at most (its
    WEBHOOK_MAX_IN_FLIGHT), each of which its kill may cut or leave to be
    repeated; ``payments``: the payment watcher's effect counts (None: it was not
    simulated); ``paid_ids``: the invoice.paid deliveries its payments must
    produce; ``domain``: the scenarios' invariants, judged already;
    ``scenarios``: what was seeded for them, shown as is."""
    d = deliveries
    statuses = Counter(d.statuses.values())
    # A parked message waits for an operator (the dead-letter alarm fires): not lost.
    parked = sorted((d.parked_ids & d.expected_ids) - d.statuses.keys())
    missing = sorted(d.expected_ids - d.statuses.keys() - set(parked))
    unexpected = sorted(d.statuses.keys() - d.expected_ids)
    succeeded = {i for i, s in d.statuses.items() if s == "succeeded"}
    dead = {i for i, s in d.statuses.items() if s == "dead"}
    unfinished = sorted(i for i in d.expected_ids & d.statuses.keys() if i not in succeeded | dead)
    never_received = sorted(i for i in succeeded if d.accepted.get(i, 0) == 0)
    lost = sorted(set(missing) | set(unfinished) | set(never_received))
    duplicates = {i: n for i, n in d.accepted.items() if n > 1}
    extra_posts = sum(n - 1 for n in duplicates.values())
    latencies = [d.first_accepted[i] - d.first_sent[i] for i in d.first_accepted if i in d.first_sent]
    metric_totals: Counter[str] = Counter()
    for inv in invocations:
        metric_totals.update(inv.metrics)
    duration = max(finished - started, 1e-9)

    invariants = [
        Invariant("one delivery per event",
                  not missing and not unexpected and len(d.statuses) + len(parked) == len(d.expected_ids),
                  f"{len(d.expected_ids)} (subscription, event) pairs, {len(d.statuses)} deliveries"
                  + (f", {len(parked)} parked in the dead-letter queue" if parked else "")
                  + (f", {len(missing)} missing" if missing else "") + (f", {len(unexpected)} unexpected"
                                                                          if unexpected else ""),
                  cases=[f"{i}: missing" for i in missing] + [f"{i}: unexpected" for i in unexpected]),
        Invariant("no lost deliveries", not lost,
                  (f"{len(lost)} lost ({len(unfinished)} unfinished, {len(never_received)} marked succeeded "
                   f"but never received)" if lost else "every delivery succeeded or was dead-lettered")
                  + f"; {_dead_letter_queue(d, parked)}",
                  cases=[f"{i}: {d.statuses.get(i, 'never created')}"
                         + (", never received" if i in never_received else "") for i in lost]),
        # A repeat POST with the same webhook-id is the documented at-least-once
        # case: the sender died after the receiver answered. A cut attempt is a
        # sender killed mid-body. Each needs a crash with that POST in flight.
        Invariant("duplicate POSTs only after crashes", extra_posts + d.cut_attempts <= kills * posts_per_kill,
                  f"{extra_posts} repeat 2xx POSTs and {d.cut_attempts} cut attempts (sender killed mid-body), "
                  f"{kills} replicas killed with at most {posts_per_kill} POSTs in flight each",
                  cases=[f"{i}: accepted {n} times" for i, n in sorted(duplicates.items())]),
        Invariant("every request signed", d.unverified == 0, f"{d.unverified} requests failed verification"),
    ]
    tick_rows = []
    bad_ticks = []
    for t in ticks:
        ok = t.ran_once()
        if not ok:
            bad_ticks.append(f"{t.job}@{t.tick}: ran {t.statuses.get('ran', 0)}, superseded "
                             f"{t.statuses.get('superseded', 0)}, tokens {sorted(t.tokens)}, lock completed "
                             f"{t.completed} at token {t.final_token}")
        tick_rows.append({"job": t.job, "tick": t.tick, "deliveries": t.deliveries, "statuses": dict(t.statuses),
                          "tokens": [list(pair) for pair in t.tokens], "completed": t.completed,
                          "final_token": t.final_token, "effects": t.effects, "ok": ok})
    if ticks:
        invariants.append(Invariant("each cron tick ran once", not bad_ticks,
                                    "; ".join(bad_ticks[:5]) or f"{len(ticks)} ticks, each ran exactly once",
                                    cases=bad_ticks))
    bad_effects = [f"{e.job} {e.what}: expected {e.expected}, got {e.actual}" for e in effects if not e.ok]
    if effects:
        invariants.append(Invariant("cron effects: one set", not bad_effects,
                                    "; ".join(bad_effects[:5]) or f"{len(effects)} effect counts as expected",
                                    cases=bad_effects))
    if payments is not None:
        invariants.extend(_payment_invariants(payments, paid_ids or set(), d, kills * posts_per_kill))
    invariants.extend(domain or [])
    invariants.append(Invariant("drained", drained, drain_detail))

    return {
        "ok": all(i.ok for i in invariants),
        "config": config,
        "scenarios": scenarios or {},
        "duration_seconds": round(duration, 3),
        "invariants": [asdict(i) for i in invariants],
        "webhooks": {
            "events_in": d.events_in,
            "messages_sent": d.messages_sent,
            "duplicate_messages": d.duplicate_messages,
            "deliveries": len(d.statuses),
            "deliveries_made": len(succeeded),
            "dead_letters": len(dead),
            "sqs_redriven": d.sqs_redriven,
            "sqs_parked": d.sqs_parked,
            "parked_deliveries": len(parked),
            "parked_ids": parked[:20],
            "status_counts": dict(statuses),
            "receiver_requests": d.requests,
            "cut_attempts": d.cut_attempts,
            "duplicates_by_webhook_id": dict(sorted(duplicates.items())),
            "duplicate_posts": extra_posts,
            "lost_deliveries": len(lost),
            "lost_ids": lost[:20],
            "fenced_writes_refused": d.fenced_refused,
        },
        "cron": {"ticks": tick_rows, "effects": [{**asdict(e), "ok": e.ok} for e in effects]},
        "payments": None if payments is None else _payment_summary(payments, paid_ids or set(), d),
        "replicas": {"count": replicas, "killed": kills, "restarted": restarts},
        "leases_reclaimed": int(metric_totals.get("leases_reclaimed", 0)),
        "fenced_writes_refused": d.fenced_refused + int(sum(t.statuses.get("superseded", 0) for t in ticks)),
        "throughput_per_second": round(len(d.first_accepted) / duration, 2),
        "ordinary_deliveries": _ordinary(d),
        "latency_ms": {
            "p50": _ms(percentile(latencies, 50)),
            "p99": _ms(percentile(latencies, 99)),
            "max": _ms(max(latencies) if latencies else None),
            "histogram": _histogram(latencies),
        },
        "timeline": _timeline(d.first_accepted, invocations, started, replicas),
        "metrics": {k: round(v, 3) for k, v in sorted(metric_totals.items())},
    }


def _dead_letter_queue(d: DeliveryFacts, parked: list[str]) -> str:
    """What the end-of-run redrive moved, and what the dead-letter queue still holds."""
    if not d.sqs_redriven and not d.sqs_parked:
        return "SQS dead-letter queue: nothing parked"
    return (f"SQS dead-letter queue: {d.sqs_redriven} messages redriven at the end of the run, {d.sqs_parked} "
            f"parked after it ({len(parked)} of them expected deliveries, the rest malformed)")


def _payment_summary(payments: list[EffectCheck], paid_ids: set[str], d: DeliveryFacts) -> dict[str, Any]:
    received = sum(1 for i in paid_ids if d.accepted.get(i, 0) > 0)
    # Dead and never received. One the receiver accepted can end dead too: its
    # last attempt's sender was killed after the answer, before recording it.
    dead = sum(1 for i in paid_ids if d.statuses.get(i) == "dead" and d.accepted.get(i, 0) == 0)
    return {
        "effects": [{**asdict(e), "ok": e.ok} for e in payments],
        "invoice_paid_deliveries": len(paid_ids),
        "invoice_paid_received": received,
        "invoice_paid_dead": dead,
        "invoice_paid_ok": received + dead == len(paid_ids),  # every one received or dead-lettered
    }


def _payment_invariants(payments: list[EffectCheck], paid_ids: set[str], d: DeliveryFacts,
                        repeats_allowed: int) -> list[Invariant]:
    """Each payment applied once (one payments row each, one transition, history
    row and activity event per invoice it paid); each paid invoice announced to
    every subscription by exactly one delivery, received (or dead-lettered)."""
    bad = [f"{e.what}: expected {e.expected}, got {e.actual}" for e in payments if not e.ok]
    parked = (paid_ids & d.parked_ids) - d.statuses.keys()
    missing = sorted(paid_ids - d.statuses.keys() - parked)
    unfinished = sorted(i for i in paid_ids & d.statuses.keys()
                        if not (d.statuses[i] == "dead" or (d.statuses[i] == "succeeded" and d.accepted.get(i))))
    repeats = sum(d.accepted.get(i, 0) - 1 for i in paid_ids if d.accepted.get(i, 0) > 1)
    delivered_ok = not missing and not unfinished and repeats <= repeats_allowed
    return [
        Invariant("each payment applied once", not bad,
                  ("; ".join(bad) or f"{payments[0].actual} payments, each applied once") if payments
                  else "no payments", cases=bad),
        Invariant("invoice.paid: one delivery per subscription", delivered_ok,
                  f"{len(paid_ids)} expected, {len(missing)} missing, {len(unfinished)} not received, "
                  f"{repeats} repeat 2xx POSTs"
                  + (f", {len(parked)} parked in the dead-letter queue" if parked else ""),
                  cases=[f"{i}: missing" for i in missing] + [f"{i}: not received" for i in unfinished]),
    ]


def scenario_rows(scenarios: dict[str, Any]) -> list[tuple[str, str]]:
    """What a run seeded for the domain invariants, as (what, value) lines for
    the text and HTML reports."""
    if not scenarios:
        return []
    tenants = "; ".join(f"{t['id']} ({t['time_zone']}, {t['currency']}, {t['subscriptions']} subscriptions)"
                        for t in scenarios["tenants"])
    return [
        ("tenants", tenants),
        ("hostile Retry-After values (429/503, then 2xx)",
         ", ".join(repr(v) for v in scenarios["hostile_retry_after"])),
        ("deliveries whose first answer trickles", str(scenarios["trickled_deliveries"])),
        ("events addressed to another tenant's subscription", str(scenarios["misaddressed_events"])),
        ("events to a subscription a 410 disabled, enabled again mid-run",
         str(scenarios["events_held_for_a_disabled_subscription"])),
        ("payment operations not to credit", ", ".join(f"{n} {why}" for why, n in
                                                     scenarios["payments_not_credited"].items())),
        ("transactions of several payment operations", str(scenarios["multi_operation_transactions"])),
    ]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)
