"""Operation histories of multi-process runs, and one checker for them (the
Jepsen idea, small enough to read).

Every worker appends JSON lines, one per event, to a file (one file for all
workers is fine: each line is one ``write`` on an ``O_APPEND`` descriptor, so
lines of several processes never interleave, and a SIGKILLed worker's history
survives up to its last line)::

    {"t": 1700000000.123, "worker": "w3", "id": 17, "event": "invoke" | "ok" | "fail",
     "op": "acquire", "name": "job-1", "token": 4, "extra": {"ttl": 5.0}}

An operation is one ``invoke`` and its completions, paired by ``(worker, id)``:

- ``ok``: the store granted or accepted it (acquire gave a lease, ack returned
  True, a fenced write was applied). A ``claim`` has one ``ok`` per item it got.
- ``fail``: refused (None, False, LeaseLostError, an empty claim), or, with
  ``extra.error``, an error whose effect is unknown (a timeout may have applied).
- no completion: the worker died during the call; its effect is unknown too.

Ops the checker reads (``name`` is a lease name or a queue item id; keep the
two distinct within one history): grants ``acquire`` and ``claim`` (extra
``ttl`` / ``lease`` in seconds, on the invoke); writes under a token ``renew``
(extra ``ttl``), ``release``, ``complete``, ``ack``, ``retry``, ``write`` and
``stale_write`` (an application write fenced by the token); ``put`` and
``cancel`` of an item; ``effect`` (an external side effect, counted for
duplicates). Anything else is kept but not judged.

Limits, by design: tokens are compared per name, so a name must not be reused
after its tokens restart (an item id re-put after its ack or cancel, a lease
completed with ``expire=True``); times are the workers' ``time.time()``, so the
workers of one history share a clock (one machine).
"""

from __future__ import annotations

import json
import os
import time
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any

GRANTS = frozenset({"acquire", "claim"})
FENCED_WRITES = frozenset({"renew", "release", "complete", "ack", "retry", "write", "stale_write"})
ENDS_HOLD = frozenset({"release", "complete", "ack", "retry"})  # the holder stops relying on its grant
REVOKES = frozenset({"put", "cancel"})  # rescheduling or removing an item takes it from its holder
# Store clocks round (Redis keeps milliseconds): two holds must overlap by more
# than this before the checker calls it a double grant.
CLOCK_SLACK = 0.005


class HistoryWriter:
    """Appends one worker's events to ``path`` (created if missing)."""

    def __init__(self, path: str | os.PathLike[str], worker: str | int) -> None:
        self.worker = str(worker)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._next_id = 0

    def invoke(self, op: str, name: str, token: int | None = None, **extra: Any) -> Op:
        """Record the start of an operation; complete it on the returned handle."""
        self._next_id += 1
        handle = Op(self, self._next_id, op, name, token)
        self._write(handle.id, "invoke", op, name, token, extra)
        return handle

    def _write(self, op_id: int, event: str, op: str, name: str, token: int | None, extra: dict[str, Any]) -> None:
        line = {"t": time.time(), "worker": self.worker, "id": op_id, "event": event, "op": op,
                "name": name, "token": token, "extra": extra}
        os.write(self._fd, (json.dumps(line, default=str) + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Op:
    """An invoked operation: call :meth:`ok` (once per granted item for a claim),
    :meth:`fail` (refused) or :meth:`error` (outcome unknown)."""

    def __init__(self, writer: HistoryWriter, op_id: int, op: str, name: str, token: int | None) -> None:
        self._writer, self.id, self.op, self.name, self.token = writer, op_id, op, name, token

    def ok(self, name: str | None = None, token: int | None = None, **extra: Any) -> None:
        self._writer._write(self.id, "ok", self.op, name or self.name, self.token if token is None else token, extra)

    def fail(self, **extra: Any) -> None:
        self._writer._write(self.id, "fail", self.op, self.name, self.token, extra)

    def error(self, exc: BaseException) -> None:
        self.fail(error=f"{type(exc).__name__}: {exc}")


def read(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every event of a history file, or of every ``*.jsonl`` file in a directory.
    A last line cut short by a SIGKILL is skipped."""
    path = Path(path)
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    events = []
    for file in files:
        for line in file.read_text(encoding="utf-8").splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events


@dataclass(frozen=True)
class Violation:
    kind: str  # overlap | token_order | duplicate_token | stale_write | lost | unfinished_claim
    name: str
    detail: str


@dataclass
class Summary:
    """Counts of one history, for a verdict or a results table."""

    ops: int = 0
    workers: int = 0
    grants: int = 0
    items: int = 0  # distinct items put
    acked: int = 0  # distinct items acked at least once
    lost: int = 0
    duplicates: int = 0  # acks and effects beyond the first of each item
    stale_refused: int = 0
    stale_accepted: int = 0
    unknown: int = 0  # ops that errored or never completed
    violations: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


@dataclass
class _Op:
    worker: str
    op: str
    name: str
    token: int | None
    start: float
    extra: dict[str, Any]
    end: float | None = None
    outcome: str | None = None  # ok | fail | error | None (never completed)
    results: list[dict[str, Any]] = field(default_factory=list)  # the ok events


@dataclass
class _Hold:
    """One grant of a name, from its ``ok`` (surely granted by then) to the first
    of: the holder letting go, a revoking put/cancel, or the end of its ttl
    counted from the invoke (the store grants at or after the invoke, so the
    lease surely lasts that long on a shared clock). A grant recorded without
    a ttl holds for no time: only its token and its stale writes are judged."""

    name: str
    token: int
    worker: str
    invoked: float
    granted: float
    until: float


def _pair(events: Iterable[dict[str, Any]]) -> list[_Op]:
    ops: dict[tuple[str, Any], _Op] = {}
    for e in sorted(events, key=lambda e: e["t"]):
        key = (str(e["worker"]), e["id"])
        if e["event"] == "invoke":
            ops[key] = _Op(str(e["worker"]), e["op"], e["name"], e.get("token"), e["t"], e.get("extra") or {})
            continue
        op = ops.get(key)
        if op is None:
            continue  # a completion whose invoke line was lost: nothing to time it by
        op.end = e["t"]
        if e["event"] == "ok":
            op.outcome = "ok"
            op.results.append(e)
        elif op.outcome is None:
            op.outcome = "error" if (e.get("extra") or {}).get("error") else "fail"
    return list(ops.values())


def _holds(ops: list[_Op], duplicates: list[Violation]) -> list[_Hold]:
    holds: dict[tuple[str, int, str], _Hold] = {}
    granted: dict[tuple[str, int], list[str]] = defaultdict(list)
    for op in ops:
        if op.op in GRANTS and op.outcome == "ok":
            ttl = op.extra.get("ttl", op.extra.get("lease"))
            for r in op.results:
                if r.get("token") is not None:
                    granted[(r["name"], r["token"])].append(op.worker)
                    until = op.start + float(ttl) if ttl is not None else r["t"]
                    holds[(r["name"], r["token"], op.worker)] = _Hold(
                        r["name"], r["token"], op.worker, op.start, r["t"], until)
    for (name, token), workers in granted.items():
        if len(workers) > 1:
            duplicates.append(Violation("duplicate_token", name, (
                f"token {token} granted {len(workers)} times (workers {', '.join(workers)})")))
    for op in ops:  # an accepted renewal extends the hold by its ttl from its invoke
        hold = holds.get((op.name, op.token, op.worker)) if op.token is not None else None
        if hold is not None and op.op == "renew" and op.outcome == "ok":
            hold.until = max(hold.until, op.start + float(op.extra.get("ttl", 0.0)))
    for op in ops:  # ...and once the holder lets go it no longer relies on it. A refused ack or
        # release does not end the hold: the grant was already gone, and if its ttl had not run
        # out, whoever took it overlaps this hold.
        hold = holds.get((op.name, op.token, op.worker)) if op.token is not None else None
        if hold is not None and op.op in ENDS_HOLD and op.outcome != "fail":
            hold.until = min(hold.until, op.start)
    by_name = _by_name(list(holds.values()))
    for op in ops:
        if op.op in REVOKES and op.outcome == "ok" and op.end is not None:
            for hold in by_name.get(op.name, ()):
                if hold.granted < op.end:
                    hold.until = min(hold.until, max(hold.granted, op.start))
    return list(holds.values())


def _by_name(holds: list[_Hold]) -> dict[str, list[_Hold]]:
    groups: dict[str, list[_Hold]] = defaultdict(list)
    for hold in holds:
        groups[hold.name].append(hold)
    return groups


def _check_overlaps(holds: list[_Hold], out: list[Violation]) -> None:
    for name, group in _by_name(holds).items():
        group.sort(key=lambda h: h.granted)
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                if b.granted >= a.until - CLOCK_SLACK:
                    break  # sorted by grant time: no later hold starts before a ends
                if b.until - a.granted > CLOCK_SLACK:
                    out.append(Violation("overlap", name, (
                        f"token {a.token} (worker {a.worker}) held until {a.until:.3f} but token {b.token} "
                        f"(worker {b.worker}) was granted at {b.granted:.3f}")))


def _check_tokens(holds: list[_Hold], out: list[Violation]) -> None:
    for name, group in _by_name(holds).items():
        by_grant = sorted(group, key=lambda h: h.granted)
        done, best = 0, None  # the highest token among grants that surely came before
        for b in sorted(group, key=lambda h: h.invoked):
            while done < len(by_grant) and by_grant[done].granted < b.invoked:
                if best is None or by_grant[done].token > best.token:
                    best = by_grant[done]
                done += 1
            if best is not None and best.token >= b.token:
                out.append(Violation("token_order", name, (
                    f"token {b.token} (worker {b.worker}) granted after token {best.token} "
                    f"(worker {best.worker})")))


def _higher(a: _Hold, b: _Hold) -> _Hold:
    return b if b.token > a.token else a


def _check_stale_writes(ops: list[_Op], holds: list[_Hold], summary: Summary) -> None:
    """A write under token T is stale once a grant of a higher token completed
    before the write was invoked; the store must refuse it."""
    newest: dict[str, tuple[list[float], list[_Hold]]] = {}  # per name: grant times, highest grant up to each
    for name, group in _by_name(holds).items():
        group.sort(key=lambda h: h.granted)
        best: list[_Hold] = list(accumulate(group, _higher))
        newest[name] = ([h.granted for h in group], best)
    for op in ops:
        if op.op not in FENCED_WRITES or op.token is None or op.name not in newest:
            continue
        times, best = newest[op.name]
        before = bisect_left(times, op.start)  # the grants that returned before the write began
        if before == 0 or best[before - 1].token <= op.token:
            continue
        if op.outcome == "ok":
            newer = best[before - 1]
            summary.stale_accepted += 1
            summary.violations.append(Violation("stale_write", op.name, (
                f"{op.op} under token {op.token} (worker {op.worker}) accepted after token {newer.token} "
                f"was granted (worker {newer.worker})")))
        elif op.outcome == "fail":
            summary.stale_refused += 1


def _check_items(ops: list[_Op], summary: Summary) -> None:
    put = {op.name for op in ops if op.op == "put" and op.outcome == "ok"}
    cancelled = {op.name for op in ops if op.op == "cancel" and op.outcome == "ok"}
    acks: dict[str, int] = defaultdict(int)
    effects: dict[str, int] = defaultdict(int)
    maybe_acked = set()
    finished: set[tuple[str, int]] = set()  # (item, token) let go by an accepted ack or retry
    for op in ops:
        if op.op == "ack" and op.outcome == "ok":
            acks[op.name] += 1
        elif op.op == "ack" and op.outcome in ("error", None):
            maybe_acked.add(op.name)
        elif op.op == "effect" and op.outcome == "ok":
            effects[op.name] += 1
        if op.op in ("ack", "retry") and op.outcome == "ok" and op.token is not None:
            finished.add((op.name, op.token))
    summary.items = len(put)
    summary.acked = len(acks)
    summary.duplicates = sum(n - 1 for n in acks.values()) + sum(n - 1 for n in effects.values())
    for name in sorted(put - cancelled - set(acks) - maybe_acked):
        summary.lost += 1
        summary.violations.append(Violation("lost", name, "put but never acked"))
    last_grant: dict[str, tuple[int, str]] = {}
    for op in ops:
        if op.op == "claim" and op.outcome == "ok":
            for r in op.results:
                if r.get("token") is not None and r["token"] > last_grant.get(r["name"], (-1, ""))[0]:
                    last_grant[r["name"]] = (r["token"], op.worker)
    for name, (token, worker) in sorted(last_grant.items()):
        if (name, token) not in finished and name not in cancelled and name not in maybe_acked:
            summary.violations.append(Violation("unfinished_claim", name, (
                f"last claim (token {token}, worker {worker}) neither acked nor retried, and not reclaimed")))


def check(events: Iterable[dict[str, Any]]) -> list[Violation]:
    """Every violation in a history; empty when it is correct."""
    return summarize(events).violations


def summarize(events: Iterable[dict[str, Any]]) -> Summary:
    """The counts of a history and its violations: overlapping holds of one name,
    tokens not strictly increasing per name (or granted twice), stale writes
    accepted, put items never acked, and claims left neither acked nor reclaimed."""
    ops = _pair(events)
    summary = Summary(ops=len(ops), workers=len({op.worker for op in ops}))
    summary.unknown = sum(1 for op in ops if op.outcome in ("error", None))
    holds = _holds(ops, summary.violations)
    summary.grants = len(holds)
    _check_overlaps(holds, summary.violations)
    _check_tokens(holds, summary.violations)
    _check_stale_writes(ops, holds, summary)
    _check_items(ops, summary)
    return summary

