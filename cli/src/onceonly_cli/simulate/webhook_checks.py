"""The webhook scenarios the report judges beyond exactly-once: a hostile
Retry-After is clamped, a trickling answer is cut at the attempt's deadline
and retried, no delivery crosses tenants, a subscription disabled by a 410
loses no event (held, then delivered once it is enabled again), and the
subscriptions' filters and caps hold (subscription_checks.py). Judged from what the receiver
saw and what the database holds after the run; the judge_* functions take
plain data, so the tests can feed them a bad state."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg.rows import dict_row

from ..testing.receiver import ReceivedRequest
from .report import Invariant
from .subscription_checks import judge_caps, judge_filters, judge_nothing_lost

# (status, Retry-After, honoured): honoured values are valid per RFC 9110 and
# longer than the cap, so the next attempt waits for the cap exactly; the
# others are not valid and are ignored (the retry schedule decides).
HOSTILE_RETRY_AFTER = (
    (429, "9" * 40, True),  # delta-seconds of 40 digits
    (503, "86400", True),  # a day
    (429, "Fri, 31 Dec 9999 23:59:59 GMT", True),  # an HTTP-date in the far future
    (503, "-30", False),  # negative: not delta-seconds
    (429, "after lunch", False),
    (503, "\u00b2", False),  # "²": str.isdigit() says yes, RFC 9110 says no
)
TRICKLE_GAP = 0.2  # seconds per byte of a trickled answer
TRICKLE_MIN_BYTES = 100  # a status line and headers at least: the whole answer takes >= 20 s
TOLERANCE = 0.05  # seconds: both times come from this host's clock, rounded by nobody
DEADLINE_ERROR = "the attempt's deadline passed"
REQUESTED = frozenset({"succeeded", "failed", "gone"})  # attempt outcomes that made a request

ATTEMPTS = """
SELECT delivery_id, attempt, outcome, error, recorded,
       extract(epoch FROM finished_at - started_at)::float8 AS seconds
  FROM webhook_attempts WHERE delivery_id = ANY(%s) ORDER BY delivery_id, id"""
HELD_ATTEMPTS = """
SELECT delivery_id, outcome, extract(epoch FROM started_at)::float8 AS started_at
  FROM webhook_attempts WHERE delivery_id = ANY(%s) ORDER BY id"""
DELIVERIES = """
SELECT d.id, d.webhook_id, d.tenant_id, s.tenant_id AS subscription_tenant, d.status
  FROM webhook_deliveries d JOIN webhook_subscriptions s ON s.id = d.webhook_id"""
FILTERS = "SELECT id, event_types FROM webhook_subscriptions WHERE id = ANY(%s)"
# Events of the run's tenants whose type a filter of theirs leaves out (the
# overdue job's invoice.overdue): the fan-out must have written none for them.
UNWANTED_EVENTS = """
SELECT count(*) FROM activity_events a
 WHERE a.tenant_id = ANY(%(tenants)s) AND a.kind = ANY(%(types)s)
   AND EXISTS (SELECT 1 FROM webhook_subscriptions s
                WHERE s.id = ANY(%(ids)s) AND s.tenant_id = a.tenant_id AND NOT a.kind = ANY(s.event_types))"""
DISABLES = """
SELECT actor, detail FROM webhook_subscription_audit WHERE webhook_id = %s AND action = 'disable' ORDER BY id"""
OUTBOX_CROSSING = """
SELECT o.webhook_id, o.event_id, o.tenant_id, s.tenant_id AS subscription_tenant
  FROM webhook_outbox o JOIN webhook_subscriptions s ON s.id = o.webhook_id
 WHERE o.tenant_id IS DISTINCT FROM s.tenant_id"""


def requests_of(history: Iterable[ReceivedRequest], endpoints: set[str]) -> list[ReceivedRequest]:
    """The requests of the run's endpoints that carried a webhook-id."""
    return [r for r in history if r.webhook_id and r.endpoint in endpoints]


def _by_delivery(requests: list[ReceivedRequest], ids: Iterable[str]) -> dict[str, list[ReceivedRequest]]:
    wanted = set(ids)
    grouped: dict[str, list[ReceivedRequest]] = {i: [] for i in wanted}
    for request in sorted(requests, key=lambda r: r.received_at):
        if request.webhook_id in wanted:
            grouped[request.webhook_id].append(request)
    return grouped


def judge_retry_after(requests: list[ReceivedRequest], statuses: dict[str, str], retry_after_of: dict[str, str],
                      cap: float, scheduled: dict[str, float], longest: float) -> Invariant:
    """After each hostile answer the delivery was attempted again (an unclamped
    value would park it for years), no earlier than its floor: the cap for a
    valid value above it, nothing for an invalid one (the schedule decides).
    ``scheduled``: the delays the sender scheduled, as sampled while the
    deliveries waited; none may exceed the cap or the schedule's ``longest``."""
    honoured = {value: ok for _, value, ok in HOSTILE_RETRY_AFTER}
    bound = max(cap, longest)
    bad, gaps = [], []
    for delivery_id, delay in scheduled.items():
        if delay > bound + TOLERANCE:
            bad.append(f"{retry_after_of.get(delivery_id)!r}: next attempt scheduled {delay:.0f} s ahead, beyond the "
                       f"{bound:g} s the policy allows")
    for delivery_id, seen in _by_delivery(requests, retry_after_of).items():
        value = retry_after_of[delivery_id]
        hostile = next((k for k, r in enumerate(seen) if r.retry_after == value), None)
        if hostile is None:
            bad.append(f"{value!r}: never answered")
            continue
        answered = seen[hostile].answered_at or seen[hostile].received_at
        later = seen[hostile + 1:]
        if not later or statuses.get(delivery_id) not in ("succeeded", "dead"):
            bad.append(f"{value!r}: no attempt after it, or unfinished ({statuses.get(delivery_id)}): parked")
            continue
        gap, floor = later[0].received_at - answered, cap if honoured.get(value, False) else 0.0
        gaps.append(gap)
        if gap < floor - TOLERANCE:
            bad.append(f"{value!r}: retried after {gap:.2f} s, before its floor of {floor:g} s")
    sampled = f"; scheduled delays seen up to {max(scheduled.values()):.2f} s (bound {bound:g} s)" if scheduled else ""
    return Invariant("hostile Retry-After clamped", bool(retry_after_of) and not bad, "; ".join(bad[:5]) or (
        f"{len(gaps)} hostile values (huge, negative, far-future date, garbage): each retried, none before its "
        f"floor (cap {cap:g} s), gaps {min(gaps):.2f}-{max(gaps):.2f} s{sampled}" if gaps
        else "no hostile answer seeded"), cases=bad)


def judge_trickle(requests: list[ReceivedRequest], attempts: dict[str, list[dict[str, Any]]], statuses: dict[str, str],
                  trickled: set[str], kills: int) -> Invariant:
    """The first answer of each trickled delivery was cut, not read whole: its
    attempt recorded the deadline's timeout and took less than the trickle
    would (or its worker was killed, when replicas were); a later attempt
    was accepted and the delivery succeeded."""
    full = TRICKLE_GAP * TRICKLE_MIN_BYTES
    bad, seconds = [], []
    for delivery_id, seen in _by_delivery(requests, trickled).items():
        if not seen or not seen[0].trickled:
            bad.append(f"{delivery_id}: its first answer was not trickled")
            continue
        if not seen[0].cut:
            bad.append(f"{delivery_id}: the trickled answer was read whole")
        if statuses.get(delivery_id) != "succeeded" or not any(r.accepted for r in seen[1:]):
            bad.append(f"{delivery_id}: not retried to success ({statuses.get(delivery_id)})")
        rows = attempts.get(delivery_id, [])
        cut = [row for row in rows if DEADLINE_ERROR in (row["error"] or "")]
        seconds += [float(row["seconds"]) for row in cut]
        if any(float(row["seconds"]) >= full for row in cut):
            bad.append(f"{delivery_id}: an attempt ran {max(float(r['seconds']) for r in cut):.1f} s, "
                       f"the whole trickle's length")
        if not cut and not kills:
            bad.append(f"{delivery_id}: no attempt ended at its deadline ({[r['error'] for r in rows]})")
    detail = (f"{len(trickled)} trickled answers ({full:g} s each if read whole): cut after "
              f"{min(seconds):.2f}-{max(seconds):.2f} s and retried" if seconds else
              f"{len(trickled)} trickled answers, each cut (the worker was killed) and retried")
    return Invariant("trickled attempts cut at the deadline and retried", bool(trickled) and not bad,
                     "; ".join(bad[:5]) or detail, cases=bad)


def attempted_while_disabled(attempts: list[dict[str, Any]], disabled_at: float,
                             enabled_at: float) -> list[str]:
    """The attempts that made a request although they started (``started_at``,
    the worker's clock before it read the subscription) after the disable had
    committed and before the enable. ``disabled_at`` must be a moment at or
    after the disable's COMMIT (the run reads it back, webhook_load.py), never
    the disabling transaction's own time (``updated_at``, ``now()``: its
    start): an attempt that read the subscription just before the commit saw
    it enabled, rightly made its request, and is no violation."""
    return [f"{a['delivery_id']}: attempted while disabled ({a['outcome']}, started "
            f"{a['started_at'] - disabled_at:.3f} s after the disable was seen committed)" for a in attempts
            if a["outcome"] in REQUESTED and disabled_at < a["started_at"] < enabled_at]


def judge_held(requests: list[ReceivedRequest], attempts: list[dict[str, Any]], statuses: dict[str, str],
               held: set[str], disabled_at: float | None, enabled_at: float | None) -> Invariant:
    """The subscription a 410 disabled: no attempt that started after the
    disable committed (``disabled_at``: when the run saw it committed) and
    before the enable (``enabled_at``) made a request, nothing was accepted
    before it was enabled again, and every one of its events, the 410's own
    included, was delivered (accepted, succeeded) after that. ``requests``:
    those of its endpoint; ``attempts``: the attempts log of its held
    deliveries (an attempt that read the subscription before the commit may
    still be on the wire: only one that started after it must not send)."""
    if disabled_at is None or enabled_at is None:
        why = (f"never disabled and enabled again (disabled at {disabled_at}, enabled at {enabled_at}): "
               f"its events were not all held ({len(held)} seeded)")
        return Invariant("disabled subscription loses no event", False, why, cases=[why])
    bad = attempted_while_disabled(attempts, disabled_at, enabled_at)
    bad += [f"{r.webhook_id}: accepted before the subscription was enabled" for r in requests
            if r.accepted and r.received_at < enabled_at - TOLERANCE]
    for delivery_id, seen in _by_delivery(requests, held).items():
        if statuses.get(delivery_id) != "succeeded" or not any(r.accepted for r in seen):
            bad.append(f"{delivery_id}: not delivered after the enable ({statuses.get(delivery_id)})")
    return Invariant("disabled subscription loses no event", bool(held) and not bad, "; ".join(bad[:5]) or (
        f"{len(held)} events held while disabled ({enabled_at - disabled_at:.1f} s, no request), "
        f"all delivered after the enable"), cases=bad)


def judge_tenants(deliveries: list[dict[str, Any]], outbox_crossing: list[dict[str, Any]],
                  requests: list[ReceivedRequest], tenant_of: dict[str, str], misaddressed: set[str]) -> Invariant:
    """No event reached another tenant's endpoint: the outbox fanned out to the
    event's tenant only, every delivery not refused is its subscription's
    tenant's, every request an endpoint got carried its own tenant's data, and
    the misaddressed events were refused without a request."""
    bad = [f"outbox: {r['tenant_id']}'s {r['event_id']} for {r['subscription_tenant']}'s {r['webhook_id']}"
           for r in outbox_crossing]
    status = {d["id"]: d["status"] for d in deliveries}
    bad += [f"{d['id']}: {d['tenant_id']}'s event, {d['status']} to {d['subscription_tenant']}'s {d['webhook_id']}"
            for d in deliveries if d["status"] != "dead" and d["tenant_id"] != d["subscription_tenant"]]
    for request in requests:
        try:
            tenant = json.loads(request.body)["data"]["tenant_id"]
        except (ValueError, TypeError, KeyError):
            tenant = None
        if tenant != tenant_of.get(request.endpoint):
            bad.append(f"{request.endpoint} ({tenant_of.get(request.endpoint)}) got {tenant}'s {request.webhook_id}")
    sent = {r.webhook_id for r in requests}
    bad += [f"misaddressed {i}: {status.get(i)}" + (", sent" if i in sent else "")
            for i in sorted(misaddressed) if status.get(i) != "dead" or i in sent]
    tenants = len(set(tenant_of.values()))
    return Invariant("no cross-tenant delivery", bool(misaddressed) and not bad, "; ".join(bad[:5]) or
                     f"{len(requests)} requests to {len(tenant_of)} endpoints of {tenants} tenants, each with its "
                     f"own tenant's data; {len(misaddressed)} misaddressed events refused, never sent", cases=bad)


def webhook_invariants(conn: psycopg.Connection[Any], history: Iterable[ReceivedRequest], load: Any, cap: float,
                       longest: float, kills: int) -> list[Invariant]:
    """``load``: the run's WebhookLoad (what was seeded, and the retry delays it
    sampled); ``cap``: WEBHOOK_MAX_RETRY_AFTER_SECONDS; ``longest``: the longest delay
    the retry schedule draws."""
    from onceonly_app.events.types import EVENT_TYPES

    from .recovery_checks import judge_auto_disable, judge_recover  # they build on this module's judges

    requests = requests_of(history, set(load.tenant_of))
    with conn.cursor(row_factory=dict_row) as cur:
        deliveries = [d for d in cur.execute(DELIVERIES) if d["webhook_id"] in load.tenant_of]
        crossing = cur.execute(OUTBOX_CROSSING).fetchall()
        attempts: dict[str, list[dict[str, Any]]] = {}
        for row in cur.execute(ATTEMPTS, (sorted(load.trickled),)):
            attempts.setdefault(row["delivery_id"], []).append(row)
        held_attempts = cur.execute(HELD_ATTEMPTS, (sorted(load.held),)).fetchall()
        filters = {row["id"]: row["event_types"] for row in cur.execute(FILTERS, (sorted(load.tenant_of),))}
        recovery = load.recovery
        failing_attempts = cur.execute(HELD_ATTEMPTS, (sorted(recovery.failing_ids),)).fetchall()
        disables = cur.execute(DISABLES, (recovery.failing,)).fetchall()
        unwanted = cur.execute(UNWANTED_EVENTS, {"tenants": sorted(set(load.tenant_of.values())),
                                                 "types": list(EVENT_TYPES), "ids": sorted(filters)}).fetchone()
    statuses = {d["id"]: d["status"] for d in deliveries}
    accepted = {r.webhook_id for r in requests if r.accepted and r.webhook_id}
    # A delivery whose messages are parked in the dead-letter queue never ran: not judged here.
    hostile = {i: value for i, value in load.retry_after_of.items() if i not in load.parked}
    return [judge_tenants(deliveries, crossing, requests, load.tenant_of, load.misaddressed - load.parked),
            judge_retry_after(requests, statuses, hostile, cap, load.scheduled, longest),
            judge_trickle(requests, attempts, statuses, load.trickled - load.parked, kills),
            judge_held([r for r in requests if r.endpoint == load.gone], held_attempts, statuses,
                       load.held - load.parked, load.disabled_at, load.enabled_at),
            judge_filters(requests, filters, set(EVENT_TYPES), int(unwanted["count"]) if unwanted else 0),
            judge_caps(requests, load.caps),
            judge_nothing_lost(statuses, {name: load.fed_to.get(name, set()) - load.parked for name in load.caps},
                               accepted),
            judge_recover([r for r in requests if r.endpoint == recovery.aborting], statuses,
                          recovery.aborted - load.parked, recovery.recovered_at, recovery.recovered),
            judge_auto_disable([r for r in requests if r.endpoint == recovery.failing],
                               [r for r in requests if r.endpoint == recovery.operational], failing_attempts,
                               statuses, recovery.failing_ids - load.parked, disables, recovery.failing,
                               recovery.notice, recovery.disabled_at, recovery.enabled_at)]
