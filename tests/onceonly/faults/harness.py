"""Run one fault scenario: put the items, start the workers (tests/onceonly/faults/worker.py)
together, inject faults episode after episode while they work, restart every
worker that died, stop once every item is acked and every tick completed, then
judge the history with the one checker (onceonly_cli.testing.history) and the
receiver's log of webhooks. The result is a plain dict: the test asserts on it
and the soak writes it to the results file the table is rendered from."""

from __future__ import annotations

import base64
import json
import os
import random
import secrets
import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Protocol

import onceonly
from onceonly.scheduled import tick_lock_name
from onceonly_cli.testing.history import HistoryWriter, read, summarize
from onceonly_cli.testing.receiver import Behaviour, WebhookReceiver
from tests.onceonly.faults import worker
from tests.support.races.race import CTX
from tests.support.stores.recorded_store import RecordedStore

RESULTS_ENV = "ONCEONLY_FAULTS_RESULTS"  # a JSON-lines file every scenario result is appended to
DRIVER = "driver"
DOUBLE_GRANTS = ("overlap", "duplicate_token")
WARM_UP = 3.0  # seconds a restarted worker needs to import and connect, on a loaded machine


@dataclass
class Plan:
    scenario: str
    store: str  # postgres | redis | dynamodb
    url: str  # what the workers connect to (maybe through a fault proxy)
    processes: int
    items: int
    ticks: int
    faults: int  # fault episodes to inject
    check_url: str | None = None  # what the driver watches progress on (default: url)
    lease: float = 5.0
    tick_ttl: float = 6.0
    batch: int = 5
    tick_rate: float = 0.1
    die_after_effect: float = 0.0  # a worker's chance to SIGKILL itself between a POST and its ack
    die_in_call: float = 0.0  # its chance to SIGKILL itself a few ms into a claim or an ack
    first_death: bool = False  # worker w0.1 SIGKILLs itself right after its first POST, before its ack
    post_latency: float = 0.02  # the receiver's answer time: a kill can land mid-POST
    skews: list[float] = field(default_factory=list)  # DynamoDB clock skew per worker slot (cycled)
    deadline: float = 300.0


class Fault(Protocol):
    def inject(self, rng: random.Random, fleet: Fleet) -> str:
        """One whole fault episode (break, wait, heal); returns what it was."""


class Fleet:
    """The worker processes: slot n runs incarnation after incarnation."""

    def __init__(self, plan: Plan, cfg: dict[str, Any]) -> None:
        self.plan, self.cfg = plan, cfg
        self.go, self.stop = CTX.Event(), CTX.Event()
        self.procs: dict[int, BaseProcess] = {}
        self.names: dict[int, str] = {}
        self.incarnation: Counter[int] = Counter()
        self.exits: dict[str, int | None] = {}  # worker name -> exit code
        self.killed: set[str] = set()  # killed by the driver
        self.started: dict[int, float] = {}

    def start(self, slot: int) -> None:
        self.incarnation[slot] += 1
        name = f"w{slot}.{self.incarnation[slot]}"
        cfg = dict(self.cfg)
        if self.plan.skews:
            cfg["skew"] = self.plan.skews[slot % len(self.plan.skews)]
        if self.plan.first_death and name == "w0.1":
            cfg["die_after_effects"] = 1
        proc = CTX.Process(target=worker.run, args=(name, cfg, self.go, self.stop), name=name)
        proc.start()
        self.procs[slot], self.names[slot], self.started[slot] = proc, name, time.time()

    def respawn_dead(self) -> None:
        for slot, proc in list(self.procs.items()):
            if not proc.is_alive():
                proc.join()
                self.exits[self.names[slot]] = proc.exitcode
                self.start(slot)

    def kill(self, rng: random.Random) -> str:
        """SIGKILL a worker that is past its start (imports, connecting), if any is."""
        alive = [s for s, p in self.procs.items() if p.is_alive()] or list(self.procs)
        working = [s for s in alive if time.time() - self.started[s] > WARM_UP]
        slot = rng.choice(working or alive)
        proc = self.procs[slot]
        if proc.pid is not None and proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
        self.killed.add(self.names[slot])
        return "SIGKILL"

    def finish(self, timeout: float = 60.0) -> list[str]:
        """Stop every worker; returns the ones that did not stop by themselves (hung)."""
        self.stop.set()
        hung = []
        for slot, proc in self.procs.items():
            proc.join(timeout)
            if proc.is_alive():
                hung.append(self.names[slot])
                proc.kill()
                proc.join()
            self.exits[self.names[slot]] = proc.exitcode
        return hung


class Crash:
    """SIGKILL a random worker; the fleet restarts it."""

    def inject(self, rng: random.Random, fleet: Fleet) -> str:
        return fleet.kill(rng)


def tick_times(count: int) -> list[str]:
    start = datetime(2030, 1, 1, tzinfo=UTC)
    return [(start + timedelta(minutes=n)).strftime("%Y-%m-%dT%H:%M:%SZ") for n in range(count)]


def _remaining(store: onceonly.Store, queue: str) -> int | None:
    """Items not yet acked; None while the store is down or cut off."""
    try:
        return store.queue(queue).depth().total
    except onceonly.OnceOnlyError:
        return None


def _ticks_done(store: onceonly.Store, locks: list[str]) -> bool:
    try:
        return all((state := store.inspect(lock)) is not None and state.completed for lock in locks)
    except onceonly.OnceOnlyError:
        return False


def run(plan: Plan, workdir: Path, faults: Fault | None) -> dict[str, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    history_path = workdir / "history.jsonl"
    queue, job = f"faults-{secrets.token_hex(4)}", f"faults-{secrets.token_hex(4)}"
    ticks = tick_times(plan.ticks)
    locks = [tick_lock_name(job, datetime.fromisoformat(t)) for t in ticks]
    items = [f"item-{n:05d}" for n in range(plan.items)]
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    rng = random.Random(f"{plan.scenario}-{plan.store}-{secrets.token_hex(4)}")

    check = onceonly.connect(plan.check_url or plan.url)
    check.setup()
    with HistoryWriter(history_path, DRIVER) as history:
        recorded = RecordedStore(check, history).queue(queue)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(recorded.put, items))

    with WebhookReceiver(quiet=True) as receiver:
        url = receiver.endpoint("hooks", secret, Behaviour(latency=plan.post_latency))
        cfg = {"url": plan.url, "history": str(history_path), "webhook_url": url, "secret": secret,
               "post_timeout": 10.0, "queue": queue, "job": job, "ticks": ticks, "lease": plan.lease,
               "tick_ttl": plan.tick_ttl, "batch": plan.batch, "tick_rate": plan.tick_rate,
               "die_after_effect": plan.die_after_effect, "die_in_call": plan.die_in_call}
        fleet = Fleet(plan, cfg)
        for slot in range(plan.processes):
            fleet.start(slot)
        started = time.time()
        fleet.go.set()
        injected: Counter[str] = Counter()
        # Fault k falls when k/(faults+1) of the items are done: spread over the
        # run however fast the machine is, and never all after the end.
        marks = [len(items) * (1 - (k + 1) / (plan.faults + 1)) for k in range(plan.faults)] if faults else []
        try:
            while True:
                assert time.time() - started < plan.deadline, (
                    f"{plan.scenario}/{plan.store}: not done after {plan.deadline:.0f}s")
                fleet.respawn_dead()
                left = _remaining(check, queue)
                while faults is not None and left is not None and marks and left <= marks[0]:
                    marks.pop(0)
                    injected[faults.inject(rng, fleet)] += 1
                    fleet.respawn_dead()
                if left == 0 and not marks and _ticks_done(check, locks):
                    break
                time.sleep(0.3)
        finally:
            hung = fleet.finish()
        elapsed = time.time() - started
        delivered = receiver.successes()
        posts = receiver.counts()
    check.close()
    events = read(history_path)
    return judge(plan, events, fleet, injected, hung, delivered, posts, items, locks, elapsed)


def _last_phase(events: list[dict[str, Any]]) -> str:
    """Where a killed worker was: the call it had started and not finished, if any."""
    done = {e["id"] for e in events if e["event"] != "invoke"}
    open_calls = [e for e in events if e["event"] == "invoke" and e["id"] not in done]
    if open_calls:
        op = open_calls[-1]["op"]
        return "mid-POST" if op == "effect" else f"mid-{op}"
    if not events:
        return "starting"
    if events[-1]["op"] == "effect" and events[-1]["event"] == "ok":
        return "after POST, before ack"
    return "between calls"


def _stall(events: list[dict[str, Any]], started: float) -> float:
    """The longest time without any accepted ack or completed tick, from the start to the last one."""
    times = sorted(e["t"] for e in events if e["event"] == "ok" and e["op"] in ("ack", "complete"))
    marks = [started, *times]
    return max((b - a for a, b in zip(marks, marks[1:], strict=False)), default=0.0)


def _maybe_acked(events: list[dict[str, Any]]) -> set[str]:
    ends = {(e["worker"], e["id"]): e for e in events if e["event"] != "invoke"}
    return {e["name"] for e in events if e["event"] == "invoke" and e["op"] in ("ack", "complete")
            and ((end := ends.get((e["worker"], e["id"]))) is None or (end.get("extra") or {}).get("error"))}


def _calls(events: list[dict[str, Any]], died: set[str]) -> tuple[float, int]:
    """The longest store call or POST (invoke to its end), and how many calls of
    workers that were not killed never ended (a hang)."""
    starts = {(e["worker"], e["id"]): e["t"] for e in events if e["event"] == "invoke"}
    ends = {(e["worker"], e["id"]): e["t"] for e in events if e["event"] != "invoke"}
    longest = max((ends[key] - t for key, t in starts.items() if key in ends), default=0.0)
    return longest, sum(1 for key in starts if key not in ends and key[0] not in died)


def _late_effects(events: list[dict[str, Any]]) -> int:
    """Webhooks sent after their item or tick was already acked or completed:
    a repeat no crash explains (the first sender finished, yet it went again)."""
    done: dict[str, float] = {}
    for e in events:
        if e["event"] == "ok" and e["op"] in ("ack", "complete"):
            done[e["name"]] = min(done.get(e["name"], e["t"]), e["t"])
    return sum(1 for e in events if e["event"] == "invoke" and e["op"] == "effect"
               and e["name"] in done and e["t"] > done[e["name"]])


def judge(plan: Plan, events: list[dict[str, Any]], fleet: Fleet, injected: Counter[str], hung: list[str],
          delivered: Counter[str], posts: Counter[str], items: list[str], locks: list[str],
          elapsed: float) -> dict[str, Any]:
    summary = summarize(events)
    by_worker: dict[str, list[dict[str, Any]]] = {}
    for e in sorted(events, key=lambda e: e["t"]):
        by_worker.setdefault(str(e["worker"]), []).append(e)
    died = {name for name, code in fleet.exits.items() if code == -signal.SIGKILL}
    phases = Counter(_last_phase(by_worker.get(name, [])) for name in died)
    accepted_acks = Counter(e["name"] for e in events if e["event"] == "ok" and e["op"] in ("ack", "complete"))
    lost = sorted((set(items) | set(locks)) - (set(delivered) & (set(accepted_acks) | _maybe_acked(events))))
    keys = set(items) | set(locks)
    longest_call, unfinished_calls = _calls(events, died)
    double_grants = [v for v in summary.violations if v.kind in DOUBLE_GRANTS]
    started = min((e["t"] for e in events if e["worker"] != DRIVER), default=0.0)
    return {
        "scenario": plan.scenario, "store": plan.store, "processes": plan.processes,
        "items": len(items), "ticks": len(locks),
        "faults": dict(injected), "kills_by_phase": dict(phases),
        "self_kills": len(died - fleet.killed),
        # A grant of something another holder still held, a second accepted
        # ack/completion of one item or tick, a webhook sent after its item was
        # done: the failures exactly-once forbids.
        "duplicates": len(double_grants) + sum(n - 1 for n in accepted_acks.values() if n > 1)
        + _late_effects(events),
        # A webhook sent again with the same key after its first sender died
        # (or was cut off) before its ack: what the idempotency key is for.
        "repeats": sum(n - 1 for k, n in posts.items() if k in keys and n > 1),
        # Never delivered, or gone without an ack (or a completion) that was
        # accepted or may have been (the acker died in the call, or timed out).
        "lost": len(lost), "lost_keys": lost[:20],
        "stale_accepted": summary.stale_accepted, "stale_refused": summary.stale_refused,
        "longest_stall": round(_stall(events, started), 2), "elapsed": round(elapsed, 1),
        "longest_call": round(longest_call, 2), "unfinished_calls": unfinished_calls, "hung": hung,
        "workers_acked": len({e["worker"].split(".")[0] for e in events if e["event"] == "ok" and e["op"] == "ack"}),
        "unknown_ops": summary.unknown,
        "given_up": sum(1 for e in events if e["event"] == "invoke" and e["op"] == "give_up"),
        "violations": [f"{v.kind} {v.name}: {v.detail}" for v in summary.violations[:20]],
        "violation_count": len(summary.violations),
    }


def record(result: dict[str, Any]) -> None:
    """Append ``result`` to the soak's results file, when one is set."""
    path = os.environ.get(RESULTS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({**result, "recorded_at": datetime.now(UTC).isoformat()}) + "\n")


def assert_sound(result: dict[str, Any], faults_expected: bool = True) -> None:
    """Exactly once held under the faults: the run raced, faults happened, and the
    history and the receiver show no double grant, loss, stale write or hang."""
    where = f"{result['scenario']}/{result['store']}"
    assert result["workers_acked"] >= 2, f"{where}: only one worker acked items; the workers did not race"
    if faults_expected:
        assert sum(result["faults"].values()) > 0, f"{where}: no fault was injected"
    assert not result["hung"], f"{where}: workers hung past the stop: {result['hung']}"
    assert result["unfinished_calls"] == 0, f"{where}: {result['unfinished_calls']} calls never returned"
    assert result["violations"] == [], f"{where}: history violations: {result['violations']}"
    assert result["duplicates"] == 0, f"{where}: {result['duplicates']} duplicates"
    assert result["lost"] == 0, f"{where}: {result['lost']} lost"
    assert result["stale_accepted"] == 0, f"{where}: {result['stale_accepted']} stale writes accepted"

