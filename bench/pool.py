"""Worker processes started once for the whole suite and reused by every race,
so no measurement pays for process start-up.

A race hands a job to P workers. Each worker prepares (imports, connects, one
real round trip) and says it is ready; only when all P are ready does the
parent send "go" to each: the barrier. Times are ``time.monotonic()``, which is
one system-wide clock on Linux, so the parent's start and the workers' ends
compare directly."""

from __future__ import annotations

import importlib
import multiprocessing
import time
import traceback
from collections.abc import Generator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from bench import counting

CTX = multiprocessing.get_context("spawn")
REPLY_TIMEOUT = 600.0  # seconds a worker may take to prepare or to finish a job

# A job is "module:function"; the function takes keyword arguments and is a
# generator: it prepares, yields once (ready), then runs and returns its result.
Job = Generator[None, None, dict[str, Any]]


class BenchError(RuntimeError):
    """A worker failed; the message carries its traceback."""


@dataclass
class Race:
    elapsed: float  # seconds from "go" to the last worker's end
    results: list[dict[str, Any]]  # one per worker, with its own start/end

    @property
    def overlapped(self) -> bool:
        """Every worker started before any finished: they really ran at once."""
        return max(r["started"] for r in self.results) < min(r["ended"] for r in self.results)


def _resolve(job: str) -> Any:
    module, function = job.split(":")
    return getattr(importlib.import_module(module), function)


def _serve(conn: Connection) -> None:
    counting.install()
    while True:
        message = conn.recv()
        if message is None:
            return
        job, kwargs = message
        try:
            steps: Job = _resolve(job)(**kwargs)
            next(steps)
            conn.send(("ready", None))
            if conn.recv() is None:  # the suite stopped while this worker waited for "go"
                return
            started = time.monotonic()
            try:
                next(steps)
                raise BenchError(f"{job} yielded twice")
            except StopIteration as stop:
                result = dict(stop.value)
            conn.send(("done", {**result, "started": started, "ended": result.get("ended", time.monotonic())}))
        except Exception:  # report any failure to the parent, which stops the suite
            conn.send(("error", traceback.format_exc()))


class Workers:
    """``size`` spawned worker processes, reused by every :meth:`race`."""

    def __init__(self, size: int) -> None:
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        for _ in range(size):
            parent, child = CTX.Pipe()
            proc = CTX.Process(target=_serve, args=(child,), daemon=True)
            proc.start()
            self._conns.append(parent)
            self._procs.append(proc)

    def _reply(self, conn: Connection, expected: str) -> Any:
        if not conn.poll(REPLY_TIMEOUT):
            raise BenchError(f"a worker sent no {expected!r} within {REPLY_TIMEOUT:.0f} s")
        kind, value = conn.recv()
        if kind == "error":
            raise BenchError(f"a worker failed:\n{value}")
        return value

    def race(self, job: str, kwargs: list[dict[str, Any]]) -> Race:
        """Run ``job`` on len(kwargs) workers at once, one kwargs each."""
        if len(kwargs) > len(self._conns):
            raise ValueError(f"{len(kwargs)} workers asked for, {len(self._conns)} started")
        conns = self._conns[: len(kwargs)]
        for conn, args in zip(conns, kwargs, strict=True):
            conn.send((job, args))
        for conn in conns:
            self._reply(conn, "ready")
        start = time.monotonic()
        for conn in conns:
            conn.send("go")
        results = [self._reply(conn, "done") for conn in conns]
        return Race(elapsed=max(r["ended"] for r in results) - start, results=results)

    def run(self, job: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``job`` on one worker; its result."""
        return self.race(job, [kwargs]).results[0]

    def close(self) -> None:
        for conn in self._conns:
            conn.send(None)
        for proc in self._procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
