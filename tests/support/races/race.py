"""Run worker functions in several OS processes released together by one
barrier. Each worker opens its own connections after start and makes one real
round trip on them BEFORE the barrier (stores connect lazily: otherwise the
first worker could finish before the last one has connected), then writes its
history to its own append-only JSON-lines file; the test reads the files
afterwards. No shared counters: the history is the evidence.

A race that nobody lost proves nothing: :func:`run_workers` fails unless at
least two workers won something (``won``), i.e. the workers really overlapped."""

from __future__ import annotations

import json
import multiprocessing
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

CTX = multiprocessing.get_context("spawn")  # no inherited sockets or pool threads
BARRIER_TIMEOUT = 120.0
PING = "race:ping"  # a lease name nobody takes: inspect() on it is one read-only round trip


class StartLine:
    """A barrier whose ``wait`` returns only once every worker has passed it and
    is running again. A plain barrier lets its waiters go one by one (each
    re-takes one lock): on a loaded machine the first one out can do all its
    work, say forty Redis round trips, before the last one leaves, and nothing
    races. Here each one, once out, waits for all the others to be out too."""

    def __init__(self, count: int) -> None:
        self._count = count
        self._barrier = CTX.Barrier(count)
        self._out = CTX.Value("i", 0)

    def wait(self, timeout: float | None = None) -> None:
        self._barrier.wait(timeout)
        with self._out.get_lock():
            self._out.value += 1
        deadline = time.monotonic() + (BARRIER_TIMEOUT if timeout is None else timeout)
        while self._out.value < self._count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {self._out.value} of {self._count} workers passed the start line")
            time.sleep(0.0005)


class History:
    """An append-only log of one worker, flushed line by line so that a
    SIGKILLed worker's history survives up to its last event."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")

    def write(self, **event: Any) -> None:
        self._file.write(json.dumps(event) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_histories(directory: Path) -> list[dict[str, Any]]:
    events = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            events.append(json.loads(line))
    return events


def assert_raced(winners: Iterable[Any], what: str) -> None:
    """At least two distinct workers won something: they ran at the same time.
    A run where one worker finished before the next one started would pass every
    exactly-once check without testing anything."""
    distinct = set(winners)
    assert len(distinct) >= 2, f"only worker(s) {sorted(distinct)} {what}: the workers did not race"


def run_workers(
    target: Callable[..., None], count: int, history_dir: Path, *args: Any,
    won: Callable[[dict[str, Any]], bool], timeout: float = 120.0,
) -> list[dict[str, Any]]:
    """Start ``count`` processes of ``target(worker_no, barrier, history_path, *args)``,
    wait for all, fail if any crashed or if fewer than two workers have an event
    that ``won`` accepts (every event carries its ``worker``), and return every
    history event."""
    history_dir.mkdir(parents=True, exist_ok=True)
    barrier = StartLine(count)
    procs = [
        CTX.Process(target=target, args=(n, barrier, history_dir / f"worker-{n}.jsonl", *args))
        for n in range(count)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout)
    alive = [p for p in procs if p.is_alive()]
    for proc in alive:
        proc.kill()
        proc.join()
    assert not alive, f"{len(alive)} workers did not finish within {timeout}s"
    codes = [p.exitcode for p in procs]
    assert codes == [0] * count, f"worker exit codes {codes}"
    events = read_histories(history_dir)
    assert_raced((e["worker"] for e in events if won(e)), f"won in {history_dir.name}")
    return events
