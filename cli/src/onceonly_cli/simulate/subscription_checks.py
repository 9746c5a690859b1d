"""What the report judges of the subscriptions simulate creates through the API
(webhook_load.py, seed): no event of a type a subscription's filter leaves out
was sent to it, no endpoint ever had more requests open than its cap, and
nothing a capped endpoint held back was lost. The judge_* functions take plain
data, so the tests can feed them a bad state."""

from __future__ import annotations

import json
from collections.abc import Iterable

from ..testing.receiver import ReceivedRequest
from .report import Invariant

FINISHED = frozenset({"succeeded", "dead"})


def event_type_of(request: ReceivedRequest) -> str | None:
    try:
        body = json.loads(request.body)
    except ValueError:
        return None
    return body.get("type") if isinstance(body, dict) else None


def judge_filters(requests: Iterable[ReceivedRequest], filters: dict[str, list[str] | None],
                  fanned_types: set[str], unwanted_events: int) -> Invariant:
    """``filters``: subscription (= endpoint name) -> the event types it wants
    (None: all); ``fanned_types``: the types the fan-out applies filters to (the
    simulation's direct SQS feed addresses one subscription and skips it);
    ``unwanted_events``: events of those types that the filtered subscriptions'
    tenants had and their filters left out, so the judge is not vacuous."""
    bad = []
    for request in requests:
        wanted = filters.get(request.endpoint)
        kind = event_type_of(request)
        if wanted is not None and kind in fanned_types and kind not in wanted:
            bad.append(f"{request.endpoint} got {kind} ({request.webhook_id}); it wants {', '.join(wanted)}")
    return Invariant("no event of an unwanted type sent", unwanted_events > 0 and not bad, "; ".join(bad[:5]) or (
        f"{unwanted_events} events of types left out by a filter, none sent" if unwanted_events else
        "no event of a filtered-out type happened: scenario not exercised"), cases=bad)


def max_open(requests: Iterable[ReceivedRequest]) -> int:
    """The most requests open at one moment (arrived, not yet answered)."""
    edges = sorted([(r.received_at, 1) for r in requests] + [(r.answered_at or r.received_at, -1) for r in requests])
    open_now = peak = 0
    for _, step in edges:  # at one instant the answer (-1) sorts before the arrival (+1)
        open_now += step
        peak = max(peak, open_now)
    return peak


def judge_caps(requests: Iterable[ReceivedRequest], caps: dict[str, int]) -> Invariant:
    """``caps``: subscription -> its max_in_flight. The receiver's own record of
    each request's open interval is the evidence."""
    by_endpoint: dict[str, list[ReceivedRequest]] = {name: [] for name in caps}
    for request in requests:
        if request.endpoint in by_endpoint:
            by_endpoint[request.endpoint].append(request)
    peaks = {name: max_open(reqs) for name, reqs in by_endpoint.items()}
    bad = [f"{name}: {peak} requests open at once, cap {caps[name]}" for name, peak in peaks.items()
           if peak > caps[name]]
    reached = sum(1 for name, peak in peaks.items() if peak == caps[name])
    return Invariant("no endpoint over its cap", bool(caps) and not bad, "; ".join(bad[:5]) or (
        f"{len(caps)} capped endpoints, at most {max(peaks.values(), default=0)} open at once; "
        f"{reached} reached their cap" if caps else "no capped endpoint: scenario not exercised"), cases=bad)


def judge_nothing_lost(statuses: dict[str, str], expected: dict[str, set[str]], accepted: set[str]) -> Invariant:
    """``expected``: capped subscription -> the deliveries the run fed it;
    ``accepted``: delivery ids the receiver accepted. Each delivery must have
    finished: delivered (and seen so by the receiver), or dead after its
    attempts or refused; never stuck behind its endpoint's limit."""
    bad = []
    for name, ids in expected.items():
        for delivery_id in sorted(ids):
            status = statuses.get(delivery_id)
            if status not in FINISHED or (status == "succeeded" and delivery_id not in accepted):
                bad.append(f"{delivery_id} of {name}: {status or 'never created'}")
    total = sum(len(ids) for ids in expected.values())
    return Invariant("nothing held back by a limit lost", total > 0 and not bad, "; ".join(bad[:5]) or (
        f"{total} deliveries to capped endpoints finished" if total else "no capped endpoint: scenario not exercised"),
        cases=bad)
