"""The history checker on hand-made histories: each violation kind is caught,
and the legitimate runs next to it (reclaim after expiry, release then
re-grant, refused stale writes, renewals) pass."""

from __future__ import annotations

import json
import multiprocessing
from itertools import count
from pathlib import Path
from typing import Any

import pytest

from onceonly_cli.testing.history import HistoryWriter, check, read, summarize

_ids = count(1)


def op(worker: str, name: str, what: str, start: float, end: float | None, outcome: str = "ok",
       token: int | None = None, results: list[tuple[str, int]] | None = None, **extra: Any) -> list[dict[str, Any]]:
    """One operation's events: invoke at ``start``, completion at ``end`` (None: never completed).
    ``results`` gives a claim's granted (item, token) pairs."""
    op_id = next(_ids)
    base = {"worker": worker, "id": op_id, "op": what}
    events = [{**base, "t": start, "event": "invoke", "name": name, "token": token, "extra": extra}]
    if end is None:
        return events
    if outcome == "ok" and results:
        events += [{**base, "t": end, "event": "ok", "name": n, "token": t, "extra": {}} for n, t in results]
    elif outcome == "ok":
        events.append({**base, "t": end, "event": "ok", "name": name, "token": token, "extra": {}})
    else:
        error = {"error": "TimeoutError"} if outcome == "error" else {}
        events.append({**base, "t": end, "event": "fail", "name": name, "token": token, "extra": error})
    return events


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return sorted(v.kind for v in check(events))


def test_release_then_regrant_is_clean() -> None:
    h = (op("a", "job", "acquire", 0.0, 0.1, token=1, ttl=10)
         + op("a", "job", "release", 1.0, 1.1, token=1)
         + op("b", "job", "acquire", 0.5, 0.6, outcome="fail", ttl=10)
         + op("b", "job", "acquire", 1.05, 1.2, token=2, ttl=10)
         + op("b", "job", "complete", 2.0, 2.1, token=2))
    assert kinds(h) == []


def test_overlapping_holds_are_caught() -> None:
    h = (op("a", "job", "acquire", 0.0, 0.1, token=1, ttl=10)
         + op("b", "job", "acquire", 1.0, 1.1, token=2, ttl=10))
    assert kinds(h) == ["overlap"]


def test_double_claim_is_caught_even_when_holders_ack_at_once() -> None:
    # a's claim was taken from it within its lease: a's ack is refused, b's accepted
    h = (op("p", "i1", "put", 0.0, 0.1)
         + op("a", "q", "claim", 1.0, 1.01, results=[("i1", 1)], lease=1)
         + op("b", "q", "claim", 1.01, 1.02, results=[("i1", 2)], lease=1)
         + op("a", "i1", "ack", 1.021, 1.03, outcome="fail", token=1)
         + op("b", "i1", "ack", 1.022, 1.03, token=2))
    assert kinds(h) == ["overlap"]


def test_grant_after_ttl_is_no_overlap_even_if_holder_died() -> None:
    # a dies holding the lease; b is granted only once a's ttl (from a's invoke) ran out
    h = (op("a", "job", "acquire", 0.0, 0.1, token=1, ttl=1)
         + op("a", "job", "write", 0.5, None, token=1)
         + op("b", "job", "acquire", 1.0, 1.1, token=2, ttl=1))
    assert kinds(h) == []


def test_renewal_extends_the_hold() -> None:
    h = (op("a", "job", "acquire", 0.0, 0.1, token=1, ttl=1)
         + op("a", "job", "renew", 0.8, 0.9, token=1, ttl=1)
         + op("b", "job", "acquire", 1.2, 1.3, token=2, ttl=1))
    assert kinds(h) == ["overlap"]
    refused = [e if e["op"] != "renew" or e["event"] == "invoke" else {**e, "event": "fail"} for e in h]
    assert kinds(refused) == []


def test_without_ttl_only_tokens_and_stale_writes_are_judged() -> None:
    h = (op("a", "job", "acquire", 0.0, 0.1, token=1)
         + op("b", "job", "acquire", 1.0, 1.1, token=2)
         + op("a", "job", "write", 2.0, 2.1, token=1))
    assert kinds(h) == ["stale_write"]


def test_tokens_must_increase() -> None:
    h = (op("a", "job", "acquire", 0.0, 0.1, token=5, ttl=1)
         + op("a", "job", "release", 0.2, 0.3, token=5)
         + op("b", "job", "acquire", 0.4, 0.5, token=3, ttl=1))
    assert kinds(h) == ["token_order"]


def test_concurrent_grants_are_not_ordered() -> None:
    # b's acquire began before a's grant returned: either order is possible
    h = (op("a", "job", "acquire", 0.0, 0.3, token=2, ttl=0.1)
         + op("b", "job", "acquire", 0.2, 0.5, token=1, ttl=0.1))
    assert "token_order" not in kinds(h)


def test_same_token_twice_is_caught() -> None:
    h = (op("a", "job", "acquire", 0.0, 0.1, token=1, ttl=0.1)
         + op("b", "job", "acquire", 5.0, 5.1, token=1, ttl=0.1))
    assert kinds(h) == ["duplicate_token", "token_order"]


def test_stale_write_accepted_is_caught_and_refused_is_counted() -> None:
    base = (op("a", "job", "acquire", 0.0, 0.1, token=1, ttl=1)
            + op("b", "job", "acquire", 2.0, 2.1, token=2, ttl=10))
    accepted = base + op("a", "job", "stale_write", 3.0, 3.1, token=1)
    refused = base + op("a", "job", "stale_write", 3.0, 3.1, outcome="fail", token=1)
    assert kinds(accepted) == ["stale_write"]
    assert kinds(refused) == []
    assert summarize(refused).stale_refused == 1
    assert summarize(accepted).stale_accepted == 1


def test_stale_ack_after_reclaim_is_caught() -> None:
    h = (op("p", "i1", "put", 0.0, 0.1)
         + op("a", "q", "claim", 0.2, 0.3, results=[("i1", 1)], lease=1)
         + op("b", "q", "claim", 1.5, 1.6, results=[("i1", 2)], lease=10)
         + op("a", "i1", "ack", 2.0, 2.1, token=1)
         + op("b", "i1", "ack", 2.2, 2.3, token=2))
    assert kinds(h) == ["stale_write"]
    assert summarize(h).duplicates == 1


def test_drained_queue_with_reclaim_and_retry_is_clean() -> None:
    h = (op("p", "i1", "put", 0.0, 0.1) + op("p", "i2", "put", 0.0, 0.1) + op("p", "i3", "put", 0.0, 0.1)
         + op("a", "q", "claim", 0.2, 0.3, results=[("i1", 1), ("i2", 1)], lease=1)
         + op("a", "i2", "retry", 0.4, 0.5, token=1)
         + op("b", "q", "claim", 0.6, 0.7, results=[("i2", 2), ("i3", 1)], lease=1)
         + op("b", "i2", "ack", 0.8, 0.9, token=2) + op("b", "i3", "ack", 0.8, 0.9, token=1)
         + op("c", "q", "claim", 1.5, 1.6, results=[("i1", 2)], lease=1)  # a died: i1 reclaimed
         + op("c", "i1", "ack", 1.7, 1.8, token=2))
    s = summarize(h)
    assert s.violations == []
    assert (s.items, s.acked, s.lost, s.duplicates) == (3, 3, 0, 0)


def test_lost_and_unfinished_items_are_caught() -> None:
    h = (op("p", "i1", "put", 0.0, 0.1) + op("p", "i2", "put", 0.0, 0.1) + op("p", "i3", "put", 0.0, 0.1)
         + op("a", "q", "claim", 0.2, 0.3, results=[("i1", 1)], lease=1)  # claimed, never finished
         + op("a", "q", "claim", 0.4, 0.5, results=[("i3", 1)], lease=1)
         + op("a", "i3", "ack", 0.6, 0.7, token=1))
    s = summarize(h)
    assert sorted((v.kind, v.name) for v in s.violations) == [("lost", "i1"), ("lost", "i2"),
                                                               ("unfinished_claim", "i1")]
    assert s.lost == 2


def test_ack_of_unknown_outcome_is_not_called_lost() -> None:
    h = (op("p", "i1", "put", 0.0, 0.1)
         + op("a", "q", "claim", 0.2, 0.3, results=[("i1", 1)], lease=1)
         + op("a", "i1", "ack", 0.4, 0.5, outcome="error", token=1))
    s = summarize(h)
    assert s.violations == []
    assert s.unknown == 1


def test_reschedule_revokes_the_holder() -> None:
    # put while in flight takes the item from its holder: a new claim is no overlap
    h = (op("p", "i1", "put", 0.0, 0.1)
         + op("a", "q", "claim", 0.2, 0.3, results=[("i1", 1)], lease=10)
         + op("p", "i1", "put", 0.5, 0.6)
         + op("b", "q", "claim", 0.7, 0.8, results=[("i1", 2)], lease=10)
         + op("a", "i1", "ack", 0.9, 1.0, outcome="fail", token=1)
         + op("b", "i1", "ack", 1.1, 1.2, token=2))
    assert kinds(h) == []


def test_duplicate_effects_are_counted() -> None:
    h = (op("p", "i1", "put", 0.0, 0.1)
         + op("a", "q", "claim", 0.2, 0.3, results=[("i1", 1)], lease=1)
         + op("a", "i1", "effect", 0.4, 0.5, key="i1")  # a dies after the effect, before the ack
         + op("b", "q", "claim", 1.5, 1.6, results=[("i1", 2)], lease=1)
         + op("b", "i1", "effect", 1.7, 1.8, key="i1")
         + op("b", "i1", "ack", 1.9, 2.0, token=2))
    s = summarize(h)
    assert s.violations == []
    assert s.duplicates == 1


def _append_lines(path: Path, worker: int, n: int) -> None:
    with HistoryWriter(path, worker) as w:
        for i in range(n):
            w.invoke("write", f"w{worker}-{i}", token=i, blob="x" * 2000).ok()


def test_writer_appends_whole_lines_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_append_lines, args=(path, w, 200)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 4
    lines = path.read_text().splitlines()
    assert len(lines) == 4 * 200 * 2
    assert all(json.loads(line)["extra"].get("blob", "x" * 2000) == "x" * 2000 for line in lines)
    assert summarize(read(path)).ops == 800


def test_read_skips_a_line_cut_by_a_kill(tmp_path: Path) -> None:
    with HistoryWriter(tmp_path / "a.jsonl", "a") as w:
        w.invoke("put", "i1").ok()
    (tmp_path / "b.jsonl").write_text('{"t": 1, "worker": "b", "id": 1, "event": "inv')
    events = read(tmp_path)
    assert [e["event"] for e in events] == ["invoke", "ok"]
    assert [v.kind for v in check(events)] == ["lost"]


@pytest.mark.parametrize("outcome", ["fail", "error"])
def test_writer_records_refusals_and_errors(tmp_path: Path, outcome: str) -> None:
    with HistoryWriter(tmp_path / "h.jsonl", 7) as w:
        o = w.invoke("ack", "i1", token=3)
        o.fail() if outcome == "fail" else o.error(TimeoutError("slow"))
    invoke, done = read(tmp_path / "h.jsonl")
    assert (invoke["worker"], invoke["event"], done["event"], done["token"]) == ("7", "invoke", "fail", 3)
    assert bool(done["extra"].get("error")) == (outcome == "error")
