"""The parent's side of the replicas: the execution environments of each
function, each a process running the real handler, a thread per environment
feeding it one invocation at a time, SIGKILL at random points (the crash
injection) and a restart after every death.

As on Lambda, every function has environments of its own, up to ``--replicas``
of them (its concurrency): a dispatch batch never waits behind a cron job. The
dispatcher's environments start before the run (warm); the scheduled
functions' start on their first invocation (a cold start, inside it).

The pools play the Lambda service: an invocation either returns, raises, or
dies with its replica; the caller (the SQS/EventBridge stand-ins in
loadgen.py) decides what is redelivered."""

from __future__ import annotations

import json
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .replica import FUNCTIONS_VAR

READY_TIMEOUT = 60.0  # importing boto3/psycopg/powertools on a busy 2-core box
TIMEOUT_GRACE = 2.0


class ReplicaStartError(RuntimeError):
    pass


@dataclass
class Invocation:
    function: str
    event: Any
    on_done: Callable[[InvocationResult], None]
    replica: int | None = None  # pin to one replica (duplicate ticks go to several)
    id: int = 0


@dataclass(frozen=True)
class InvocationResult:
    invocation: Invocation
    replica: int
    ok: bool
    response: Any = None
    error: str | None = None
    crashed: bool = False  # the replica was SIGKILLed (or died) during the invocation
    started: float = 0.0
    finished: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)


class Replica:
    """One replica process and its socket."""

    def __init__(self, index: int, env: dict[str, str], log: Path) -> None:
        self.index = index
        parent_sock, child_sock = socket.socketpair()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "onceonly_cli.simulate.replica", "--fd", str(child_sock.fileno()),
             "--log", str(log)],
            env=env, pass_fds=(child_sock.fileno(),), stdin=subprocess.DEVNULL,
            # Its own session: a terminal Ctrl-C reaches only the parent, which stops
            # every replica itself; a replica whose parent died reads EOF and exits.
            start_new_session=True,
        )
        child_sock.close()
        self.sock = parent_sock
        self.reader = parent_sock.makefile("r", encoding="utf-8")
        self.writer = parent_sock.makefile("w", encoding="utf-8")

    def wait_ready(self) -> None:
        self.sock.settimeout(READY_TIMEOUT)
        try:
            line = self.reader.readline()
        except TimeoutError:
            line = ""
        if not line:
            self.kill()
            raise ReplicaStartError(f"replica {self.index} did not start: see its log")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.sock.close()


class ReplicaPool:
    """One function's environments. ``warm``: started by :meth:`start`;
    otherwise each starts on the first invocation it is given."""

    def __init__(self, count: int, env: dict[str, str], log_dir: Path, *, crash_rate: float,
                 rng: random.Random, timeouts: dict[str, float], name: str = "replica", warm: bool = True):
        self._env = env
        self._log_dir = log_dir
        self._name, self._warm = name, warm
        self._crash_rate = crash_rate
        self._rng = rng
        self._rng_lock = threading.Lock()
        self._timeouts = timeouts
        self._cond = threading.Condition()
        self._shared: deque[Invocation] = deque()
        self._pinned: list[deque[Invocation]] = [deque() for _ in range(count)]
        self._idle: set[int] = set()  # environments waiting for an invocation
        self._replicas: list[Replica | None] = [None] * count
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self._next_id = 0
        self.kills = 0
        self.restarts = 0
        self.pending = 0

    @property
    def size(self) -> int:
        return len(self._replicas)

    # -- lifecycle ----------------------------------------------------------
    def log_of(self, index: int) -> Path:
        return self._log_dir / f"{self._name}-{index}.log"

    def start(self) -> None:
        """Start the serving threads; a warm pool first starts every replica in
        parallel and waits until each has imported its handlers."""
        if self._warm:
            fresh = [Replica(i, self._env, self.log_of(i)) for i in range(self.size)]
            self._replicas = list(fresh)
            for replica in fresh:
                replica.wait_ready()
        for index in range(self.size):
            thread = threading.Thread(target=self._serve, args=(index,), name=f"{self._name}-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for replica in self._replicas:
            if replica is not None:
                replica.kill()
        for thread in self._threads:
            thread.join(timeout=5)

    # -- invocations --------------------------------------------------------
    def submit(self, invocation: Invocation) -> None:
        with self._cond:
            self._next_id += 1
            invocation.id = self._next_id
            self.pending += 1
            if invocation.replica is None:
                self._shared.append(invocation)
            else:
                self._pinned[invocation.replica % self.size].append(invocation)
            self._cond.notify_all()

    def _next(self, index: int) -> Invocation | None:
        """The next invocation for environment ``index``: one pinned to it, else
        a shared one, which an environment not started yet leaves to an idle
        started one (Lambda reuses a warm environment before it starts one)."""
        with self._cond:
            self._idle.add(index)
            try:
                while not self._stopping:
                    if self._pinned[index]:
                        return self._pinned[index].popleft()
                    if self._shared and (self._replicas[index] is not None or not any(
                            self._replicas[i] is not None for i in self._idle)):
                        return self._shared.popleft()
                    self._cond.wait()
            finally:
                self._idle.discard(index)
        return None

    def _serve(self, index: int) -> None:
        while (invocation := self._next(index)) is not None:
            result = self._run(index, invocation)
            try:
                invocation.on_done(result)
            finally:
                with self._cond:
                    self.pending -= 1
                    self._cond.notify_all()

    def _crash_delay(self) -> float | None:
        with self._rng_lock:
            if self._rng.random() >= self._crash_rate:
                return None
            # Random points: during imports-warm handler work, HTTP calls, DB writes.
            return self._rng.uniform(0.0, 0.15)

    def _run(self, index: int, invocation: Invocation) -> InvocationResult:
        started = time.time()
        if self._replicas[index] is None:  # a cold start, inside the invocation
            try:
                self._restart(index, counted=False)
            except ReplicaStartError as exc:
                return InvocationResult(invocation, index, False, error=str(exc), crashed=True,
                                        started=started, finished=time.time())
        replica = self._replicas[index]
        assert replica is not None
        killed = threading.Event()
        done = threading.Event()

        def crash() -> None:
            if not done.is_set():
                killed.set()
                replica.proc.send_signal(signal.SIGKILL)

        delay = self._crash_delay()
        timer = threading.Timer(delay, crash) if delay is not None else None
        request = {"id": invocation.id, "function": invocation.function, "event": invocation.event}
        line = ""
        try:
            replica.sock.settimeout(self._timeouts.get(invocation.function, 60.0) + TIMEOUT_GRACE)
            replica.writer.write(json.dumps(request) + "\n")
            replica.writer.flush()
            if timer:
                timer.start()
            line = replica.reader.readline()
        except (OSError, TimeoutError):
            line = ""
        finally:
            done.set()
            if timer:
                timer.cancel()
        if line:
            if killed.is_set():
                # The crash timer fired as the reply came in: the reply stands, but
                # the replica is dead all the same; count it and replace it now.
                self.kills += 1
                self._restart(index)
            reply = json.loads(line)
            return InvocationResult(invocation, index, bool(reply["ok"]), reply.get("response"),
                                    reply.get("error"), False, reply["started"], reply["finished"],
                                    reply.get("metrics") or {})
        # The replica died (our SIGKILL), or hung past its timeout: replace it.
        if killed.is_set():
            self.kills += 1
        self._restart(index)
        return InvocationResult(invocation, index, False, error="replica killed" if killed.is_set() else
                                "replica died or timed out", crashed=True, started=started, finished=time.time())

    def _restart(self, index: int, *, counted: bool = True) -> None:
        old = self._replicas[index]
        if old is not None:
            old.kill()
            self._replicas[index] = None
        if self._stopping:
            return
        fresh = self._replicas[index] = Replica(index, self._env, self.log_of(index))  # stop() kills it
        try:
            fresh.wait_ready()
        except ReplicaStartError:
            self._replicas[index] = None
            raise
        if counted:
            self.restarts += 1


class FunctionPools:
    """A :class:`ReplicaPool` per function, ``count`` environments each, each
    environment importing its own function's handler only; ``warm`` names the
    function whose environments start before the run. Invocations go to their
    function's pool; a pinned one (``replica``) to that environment of it."""

    def __init__(self, count: int, env: dict[str, str], log_dir: Path, *, crash_rate: float,
                 rng: random.Random, timeouts: dict[str, float], warm: str) -> None:
        self.count = count
        functions = json.loads(env[FUNCTIONS_VAR])
        self._pools = {
            function: ReplicaPool(
                count, {**env, FUNCTIONS_VAR: json.dumps([f for f in functions if f["logical_id"] == function])},
                log_dir, crash_rate=crash_rate, rng=rng, timeouts=timeouts, name=function,
                warm=function == warm)
            for function in timeouts}
        self.warm = self._pools[warm]

    @property
    def size(self) -> int:
        return self.count

    @property
    def kills(self) -> int:
        return sum(pool.kills for pool in self._pools.values())

    @property
    def restarts(self) -> int:
        return sum(pool.restarts for pool in self._pools.values())

    def start(self) -> None:
        for pool in self._pools.values():
            pool.start()

    def stop(self) -> None:
        for pool in self._pools.values():
            pool.stop()

    def submit(self, invocation: Invocation) -> None:
        self._pools[invocation.function].submit(invocation)

