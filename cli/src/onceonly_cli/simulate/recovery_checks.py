"""What the report judges of the endpoint-operation scenarios
(recovery_load.py): recover sends every aborted event once more, under its
webhook-id, and a second run nothing new; a subscription failing for the whole
period is disabled automatically, once, with endpoint.disabled to the tenant's
operational subscription, and loses no event. The judge_* functions take plain
data, so the tests can feed them a bad state."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..testing.receiver import ReceivedRequest
from .report import Invariant
from .webhook_checks import TOLERANCE, attempted_while_disabled

AUTO_DISABLE_ACTOR = "auto-disable"


def judge_recover(requests: Iterable[ReceivedRequest], statuses: dict[str, str], aborted: set[str],
                  recovered_at: float | None, recovered: list[tuple[int, int, int]]) -> Invariant:
    """``requests``: the aborting endpoint's; ``recovered``: (re-queued, newly
    sent, of them aborted) per recover run, in order."""
    name = "recover sends each failed event once more"
    if recovered_at is None or len(recovered) != 2:
        why = f"never recovered ({len(aborted)} aborting events seeded, runs: {recovered})"
        return Invariant(name, False, why, cases=[why])
    bad = []
    first, second = recovered
    if first != (len(aborted), len(aborted), len(aborted)):
        bad.append(f"first recover: {first[0]} re-queued, {first[1]} newly, {first[2]} aborted; "
                   f"expected all {len(aborted)} aborted ones")
    if second[1] != 0:
        bad.append(f"second recover sent {second[1]} new ones: not idempotent")
    by_id: dict[str, list[ReceivedRequest]] = {i: [] for i in aborted}
    for request in requests:
        if request.webhook_id in by_id:
            by_id[request.webhook_id].append(request)
    # Split at recovered_at itself, with no tolerance: an aborted delivery has no
    # queue item until recover() runs, after recovered_at was read, and the abort
    # that made it so was received before its status was written and read back.
    # (An abort received a few ms before the recover is "before", never "after".)
    for delivery_id, seen in sorted(by_id.items()):
        before = [r for r in seen if r.received_at < recovered_at]
        after = [r for r in seen if r.received_at >= recovered_at]
        if not before or any(r.accepted for r in before):
            bad.append(f"{delivery_id}: not aborted before the recover ({[r.status for r in before]})")
        if statuses.get(delivery_id) != "succeeded" or not any(r.accepted for r in after):
            bad.append(f"{delivery_id}: not delivered after the recover ({statuses.get(delivery_id)})")
    return Invariant(name, bool(aborted) and not bad, "; ".join(bad[:5]) or (
        f"{len(aborted)} events aborted by their receiver, each sent once more by recover under its "
        f"webhook-id; run twice, the second re-queued {second[0]} waiting ones and sent nothing new"), cases=bad)


def judge_auto_disable(requests: Iterable[ReceivedRequest], notices: Iterable[ReceivedRequest],
                       attempts: list[dict[str, Any]], statuses: dict[str, str], failing_ids: set[str],
                       disables: list[dict[str, Any]], webhook_id: str, notice_id: str,
                       disabled_at: float | None, enabled_at: float | None) -> Invariant:
    """``requests``: the failing endpoint's; ``notices``: the operational
    endpoint's; ``attempts``: the failing deliveries' attempts log;
    ``disables``: the failing subscription's 'disable' audit rows."""
    name = "failing endpoint disabled with notice, no event lost"
    if disabled_at is None or enabled_at is None:
        why = f"never disabled automatically and enabled again ({len(failing_ids)} events seeded)"
        return Invariant(name, False, why, cases=[why])
    bad = []
    automatic = [d for d in disables if d["actor"] == AUTO_DISABLE_ACTOR and (d["detail"] or {}).get("automatic")]
    if len(automatic) != 1 or len(disables) != 1:
        bad.append(f"{len(automatic)} automatic disables among {len(disables)}: expected exactly one")
    bad += attempted_while_disabled(attempts, disabled_at, enabled_at)
    bad += [f"{r.webhook_id}: accepted before the subscription was enabled" for r in requests
            if r.accepted and r.received_at < enabled_at - TOLERANCE]
    accepted = {r.webhook_id for r in requests if r.accepted}
    bad += [f"{i}: not delivered after the enable ({statuses.get(i)})" for i in sorted(failing_ids)
            if statuses.get(i) != "succeeded" or i not in accepted]
    told = [r for r in notices if r.accepted]
    if {r.webhook_id for r in told} != {notice_id}:
        bad.append(f"endpoint.disabled: accepted {sorted({str(r.webhook_id) for r in told})}, expected {notice_id}")
    for request in told:
        body = json.loads(request.body)
        if body.get("type") != "endpoint.disabled" or body.get("data", {}).get("subscription_id") != webhook_id:
            bad.append(f"notice {request.webhook_id}: {body.get('type')} about {body.get('data')}")
    return Invariant(name, bool(failing_ids) and not bad, "; ".join(bad[:5]) or (
        f"disabled automatically at its first failure of the run (failing for the whole period), "
        f"endpoint.disabled delivered to the operational endpoint; {len(failing_ids)} events held "
        f"{enabled_at - disabled_at:.1f} s, all delivered after the enable"), cases=bad)
