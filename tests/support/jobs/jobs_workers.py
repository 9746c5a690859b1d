"""Run the REAL scheduled-job handlers in separate OS processes (spawned: no
inherited sockets or pool threads), the way replicas of a Lambda function run.

Each child sets its environment (the test's tenant and job name among it:
BILLING_TENANT, BILLING_JOB_NAME, read by the handler at cold start), loads
``functions/<name>/app.py`` with the local Lambda runtime, waits on the shared barrier (if any) and invokes the
handler once. What it returned, or raised, goes to its own JSON-lines file:
the test reads those and the database afterwards.

Pausing: a child started with ``pause_at`` stops itself (SIGSTOP) at that named
point of the job (tests/support/stores/pause_points.py); :func:`wait_until_stopped` waits for it.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from tests.support import REPO_ROOT
from tests.support.races.race import StartLine

REPO = REPO_ROOT
CTX = multiprocessing.get_context("spawn")


@dataclass(frozen=True)
class Invocation:
    function: str  # folder under functions/
    env: dict[str, str]  # the handler's whole configuration, read at its cold start
    event: dict[str, Any]


def invoke_in_child(n: int, barrier: Any, history_path: Path, invocation: Invocation,
                    pause_at: str | None) -> None:
    """The child's body (module-level so that spawn can import it)."""
    os.environ.update(invocation.env)
    from onceonly_cli.local.lambda_runtime import LambdaContext, close_function_clients, load_handler

    if pause_at:
        from tests.support.stores.pause_points import install

        install(pause_at)
    handler = load_handler(REPO / "functions" / invocation.function, "app.handler")
    if barrier is not None:
        from tests.support.functions.function_clients import open_function_clients

        open_function_clients()  # connected before the race, like a warm container
        barrier.wait(timeout=120)
    record: dict[str, Any] = {"worker": n, "pid": os.getpid()}
    try:
        record["outcome"] = handler(invocation.event, LambdaContext(invocation.function, timeout_seconds=120))
    except Exception as exc:  # noqa: BLE001 - recorded for the test to assert on
        record["error"] = type(exc).__name__
        record["message"] = str(exc)
    with history_path.open("a", encoding="utf-8") as out:
        out.write(json.dumps(record, default=str) + "\n")
    close_function_clients()  # an unclosed pool can hang this process's exit on Python 3.13


@dataclass
class Replicas:
    """Processes started for one test; every one is waited for or killed."""

    directory: Path
    processes: list[BaseProcess] = field(default_factory=list)

    def start(self, invocation: Invocation, *, name: str, pause_at: str | None = None,
              barrier: Any = None, n: int = 0) -> BaseProcess:
        self.directory.mkdir(parents=True, exist_ok=True)
        proc = CTX.Process(target=invoke_in_child,
                           args=(n, barrier, self.directory / f"{name}.jsonl", invocation, pause_at))
        proc.start()
        self.processes.append(proc)
        return proc

    def run_together(self, invocation: Invocation, count: int = 8, timeout: float = 120.0) -> list[dict[str, Any]]:
        """``count`` processes released by one barrier; returns their records."""
        barrier = StartLine(count)
        procs = [self.start(invocation, name=f"replica-{n}", barrier=barrier, n=n) for n in range(count)]
        for proc in procs:
            self.join(proc, timeout)
        return [self.record(f"replica-{n}") for n in range(count)]

    def run_while_the_winner_waits(self, invocation: Invocation, db_url: str, table: str, count: int = 8,
                                   timeout: float = 120.0) -> list[dict[str, Any]]:
        """As :meth:`run_together`, with ``table`` locked until every replica but
        one has answered: the one that won the tick is blocked in its body until
        then, so every other one met the tick while it ran, however the machine
        schedules them. (The job's DATABASE_URL needs a ``?timeout=`` above the
        wait: a statement blocked longer than the default bound is cancelled.)"""
        barrier = StartLine(count)
        names = [f"replica-{n}" for n in range(count)]
        deadline = time.monotonic() + timeout
        with table_locked(db_url, table):
            procs = [self.start(invocation, name=name, barrier=barrier, n=n) for n, name in enumerate(names)]
            while sum((self.directory / f"{name}.jsonl").exists() for name in names) < count - 1:
                assert time.monotonic() < deadline, f"the losing replicas did not answer within {timeout}s"
                assert sum(p.is_alive() for p in procs) >= 1, "every replica ended while the table was locked"
                time.sleep(0.05)
        for proc in procs:
            self.join(proc, timeout)
        return [self.record(name) for name in names]

    def join(self, proc: BaseProcess, timeout: float = 120.0) -> None:
        proc.join(timeout)
        assert not proc.is_alive(), f"process {proc.pid} did not finish within {timeout}s"
        assert proc.exitcode == 0, f"process {proc.pid} exited with {proc.exitcode}"

    def record(self, name: str) -> dict[str, Any]:
        lines = (self.directory / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
        assert len(lines) == 1, f"{name}: expected one record, got {lines}"
        return json.loads(lines[0])  # type: ignore[no-any-return]

    def stop_all(self) -> None:
        for proc in self.processes:
            if proc.is_alive():
                proc.kill()  # SIGKILL also ends a stopped process
                proc.join(10)


@contextmanager
def table_locked(db_url: str, table: str) -> Iterator[None]:
    """Hold ``table`` exclusively: a job that touches it blocks mid-body, its
    process alive (and heartbeating) until the lock goes or the process dies."""
    import psycopg

    with psycopg.connect(db_url) as conn, conn.transaction():
        conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        yield


def wait_until_stopped(proc: BaseProcess, timeout: float = 90.0) -> None:
    """Wait until ``proc`` stopped itself at its pause point (without reaping it)."""
    assert proc.pid is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = os.waitid(os.P_PID, proc.pid, os.WSTOPPED | os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if info is not None:
            assert info.si_code == os.CLD_STOPPED, f"process {proc.pid} ended instead of pausing ({info})"
            return
        time.sleep(0.05)
    raise AssertionError(f"process {proc.pid} did not reach its pause point within {timeout}s")


def wait_until_expired(store: Any, *names: str, timeout: float = 60.0) -> None:
    """Wait until every lease in ``names`` is past its expiry (by this host's
    clock, with a margin), so that a new invocation can take it over."""
    deadline = time.monotonic() + timeout
    for name in names:
        state = store.inspect(name)
        assert state is not None, f"lease {name} was never granted"
        while state.busy_until + 0.2 > time.time():
            assert time.monotonic() < deadline, f"lease {name} did not expire within {timeout}s"
            time.sleep(min(0.2, max(0.01, state.busy_until + 0.2 - time.time())))
            state = store.inspect(name)
