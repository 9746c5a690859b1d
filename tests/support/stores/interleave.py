"""Force the order of two holders of one piece of work inside one test process.

A fenced write is only proven if it is refused in every order, and some orders
("the newer holder stamped but has not finished") last only while the newer
holder is mid-way. Here the newer holder runs in a thread and stops at a seam
(an injected callback: a sender, a payments source, a fence subclass) until the
test lets it go; the stale holder acts in the test's own thread meanwhile.

Every wait is bounded, and the ``interleave`` fixture (fence_fixtures.py) lets
every seam go at teardown, so a broken fence fails its test instead of hanging it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import psycopg

WAIT = 30.0  # seconds; a bound on waiting for the other holder, never an expectation of speed


class Seam:
    """A point where a holder stops until the test lets it go. Call it from the
    holder's injected callback."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._reached = threading.Event()
        self._go = threading.Event()

    def __call__(self, *_: Any) -> None:
        self._reached.set()
        if not self._go.wait(WAIT):
            raise TimeoutError(f"{self.name}: the test never let it go on")

    @property
    def reached(self) -> bool:
        return self._reached.is_set()

    def let_go(self) -> None:
        self._go.set()


class Background:
    """One holder's run in a thread of its own."""

    def __init__(self, name: str, run: Callable[[], Any]) -> None:
        self.name = name
        self._run = run
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._future: Future[Any] | None = None

    def start(self, *, until: Seam | None = None) -> None:
        """Start the run; with ``until``, return once it stopped at that seam.
        Raises AssertionError if the run ended without reaching it."""
        self._future = self._executor.submit(self._run)
        if until is None:
            return
        deadline = time.monotonic() + WAIT
        while not until.reached:
            if self._future.done():
                raise AssertionError(f"{self.name} ended before reaching {until.name!r}: {self._outcome()}")
            assert time.monotonic() < deadline, f"{self.name} did not reach {until.name!r} within {WAIT}s"
            time.sleep(0.01)

    @property
    def done(self) -> bool:
        return self._future is not None and self._future.done()

    def result(self) -> Any:
        """What the run returned; re-raises what it raised."""
        assert self._future is not None, f"{self.name} was never started"
        return self._future.result(WAIT)

    def _outcome(self) -> str:
        assert self._future is not None
        error = self._future.exception()
        return repr(error) if error is not None else f"returned {self._future.result()!r}"

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)


class Interleaving:
    def __init__(self) -> None:
        self._seams: list[Seam] = []
        self._runs: list[Background] = []

    def seam(self, name: str) -> Seam:
        seam = Seam(name)
        self._seams.append(seam)
        return seam

    def background(self, name: str, run: Callable[[], Any]) -> Background:
        background = Background(name, run)
        self._runs.append(background)
        return background

    def close(self) -> None:
        for seam in self._seams:
            seam.let_go()
        for run in self._runs:
            run.close()


def wait_until_blocked_by(db_url: str, backend_pid: int, *, unless: Callable[[], bool]) -> bool:
    """Wait until some session waits on a lock held by ``backend_pid`` (True), or
    until ``unless()`` holds (False): the other holder got past the point where
    it should have waited."""
    deadline = time.monotonic() + WAIT
    with psycopg.connect(db_url, autocommit=True) as conn:
        while True:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE %s = ANY (pg_blocking_pids(pid))",
                               (backend_pid,)).fetchone()
            if row is not None and row[0] > 0:
                return True
            if unless():
                return False
            assert time.monotonic() < deadline, f"nobody waited on backend {backend_pid} within {WAIT}s"
            time.sleep(0.01)
