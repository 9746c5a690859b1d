"""The stand-ins for SQS and EventBridge that drive the replicas.

- SQS: messages go out in batches of up to 10 to any replica; a batch whose
  invocation died or raised comes back after a visibility timeout, and the
  records named in ``batchItemFailures`` come back alone; after the
  template's ``maxReceiveCount`` receives a message is parked in the
  dead-letter queue, until :meth:`Driver.redrive_dead_letters` moves it back
  (an operator's redrive, as SQS's StartMessageMoveTask does: with a fresh
  receive count). Duplicates are mixed in: the same message id delivered
  twice, and the same event sent again.
- EventBridge: every tick is delivered several times at once, each copy pinned
  to a different environment of its function, and once more after it completed; a delivery whose
  invocation died is retried until a run of the tick completes.

All state lives in the driver's thread: replica threads only post results to a
queue that :meth:`Driver.step` drains."""

from __future__ import annotations

import heapq
import itertools
import queue
import random
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from .events import scheduled_event, sqs_event, sqs_record
from .replicas import FunctionPools, Invocation, InvocationResult
from .report import InvocationFacts, TickFacts

BATCH_SIZE = 10
# Seconds before a failed message is visible again: the template's VisibilityTimeout
# (360 s, six function timeouts) shrunk for the simulation, as every wait in it is.
VISIBILITY_DELAY = 0.3
TICK_RETRY_DELAY = 0.5
RETRY_TICK_EVERY = 0.25  # how often the webhook retry schedule fires (every minute on AWS)


@dataclass
class Message:
    message_id: str
    body: Any
    receives: int = 0


@dataclass
class CronJob:
    function: str
    job: str
    ticks: list[datetime]
    copies: int = 3  # concurrent deliveries of each tick, to distinct replicas
    before: Callable[[], None] | None = None  # run once, when every earlier job's ticks have settled


@dataclass
class _TickState:
    facts: TickFacts
    when: datetime
    function: str
    in_flight: int = 0
    resolved: bool = False  # a run completed (ran, or a later copy saw "completed")
    late_duplicate_sent: bool = False
    errors: int = 0  # invocations that raised: retried twice, like Lambda's async retries
    given_up: bool = False

    @property
    def settled(self) -> bool:
        return self.in_flight == 0 and (self.given_up or (self.resolved and self.late_duplicate_sent))


@dataclass
class Driver:
    pool: FunctionPools
    rng: random.Random
    dispatch_function: str
    retry_function: str | None
    max_receives: int  # the source queue's maxReceiveCount (template.yaml)
    cron_jobs: list[CronJob] = field(default_factory=list)
    max_batches_in_flight: int = 8
    cron_every: float = 0.3  # seconds between two ticks fired (spread over the run)
    on_feed: Callable[[str, float], None] | None = None  # (message key, time) when first sent

    def __post_init__(self) -> None:
        self._results: queue.SimpleQueue[tuple[InvocationResult, Callable[[InvocationResult], None]]] = \
            queue.SimpleQueue()
        self._pending: deque[Message] = deque()
        self._delayed: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._batches_in_flight = 0
        self._retry_in_flight = 0
        self._next_retry_tick = 0.0
        self._next_cron = 0.0
        self._ticks: dict[tuple[str, str], _TickState] = {}
        # Jobs run one after another (e-mails are sent after the jobs that queue
        # them); the ticks of one job are fired cron_every apart.
        self._cron_jobs: deque[CronJob] = deque(self.cron_jobs)
        self._cron_queue: deque[tuple[CronJob, datetime]] = deque()
        self.messages_sent = 0
        self.dead_letter_queue: list[Message] = []  # parked: maxReceiveCount receives, none succeeded
        self.redriven: list[Message] = []  # moved back from the dead-letter queue by redrive_dead_letters
        self.invocations: list[InvocationFacts] = []
        self.errors: Counter[str] = Counter()

    # -- input ----------------------------------------------------------------
    def enqueue(self, messages: list[Message]) -> None:
        self._pending.extend(messages)

    def _later(self, delay: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._delayed, (time.monotonic() + delay, next(self._order), action))

    def _submit(self, function: str, event: Any, on_done: Callable[[InvocationResult], None],
                replica: int | None = None) -> None:
        def post(result: InvocationResult) -> None:
            self._results.put((result, on_done))  # handled in the driver's thread

        self.pool.submit(Invocation(function, event, post, replica))

    # -- SQS ----------------------------------------------------------------------
    def _pump_sqs(self) -> None:
        while self._pending and self._batches_in_flight < self.max_batches_in_flight:
            batch: list[Message] = []
            while self._pending and len(batch) < BATCH_SIZE:
                message = self._pending.popleft()
                if any(m.message_id == message.message_id for m in batch):
                    self._later(VISIBILITY_DELAY, partial(self._pending.append, message))
                    continue
                batch.append(message)
            if not batch:
                break
            now = time.time()
            for message in batch:
                message.receives += 1
                self.messages_sent += 1
                if self.on_feed and message.receives == 1:
                    self.on_feed(message.message_id, now)
            records = [sqs_record(m.message_id, m.body, m.receives) for m in batch]
            self._batches_in_flight += 1
            self._submit(self.dispatch_function, sqs_event(records), partial(self._batch_done, batch))

    def _batch_done(self, batch: list[Message], result: InvocationResult) -> None:
        self._batches_in_flight -= 1
        if result.ok and isinstance(result.response, dict):
            failed_ids = {f.get("itemIdentifier") for f in result.response.get("batchItemFailures") or []}
            failed = [m for m in batch if m.message_id in failed_ids]
        else:
            failed = batch  # the whole batch becomes visible again
        for message in failed:
            if message.receives >= self.max_receives:
                self.dead_letter_queue.append(message)
            else:
                self._later(VISIBILITY_DELAY, partial(self._pending.append, message))

    def redrive_dead_letters(self) -> list[Message]:
        """Move every parked message back to the queue with a fresh receive
        count, as an operator's redrive does. Returns the messages moved."""
        moved, self.dead_letter_queue = self.dead_letter_queue, []
        for message in moved:
            message.receives = 0
        self.redriven.extend(moved)
        self._pending.extend(moved)
        return moved

    # -- EventBridge ----------------------------------------------------------------
    def _fire_retry_tick(self) -> None:
        if self.retry_function is None or self._retry_in_flight >= 2:
            return
        # Two concurrent runs of every tick: the retry worker needs no leader.
        replicas = range(min(2, self.pool.size))
        when = datetime.now().astimezone()
        for replica in replicas:
            self._retry_in_flight += 1
            self._submit(self.retry_function, scheduled_event("webhook-retry", when),
                         self._retry_done, replica=replica)

    def _retry_done(self, result: InvocationResult) -> None:
        self._retry_in_flight -= 1

    def _fire_cron(self, job: CronJob, when: datetime) -> None:
        key = (job.job, when.strftime("%Y-%m-%dT%H:%M:%SZ"))
        state = self._ticks.setdefault(key, _TickState(TickFacts(job.job, key[1], 0, Counter()), when,
                                                       job.function))
        # Concurrent copies run in distinct environments of the function: the
        # same ones every tick, as Lambda reuses its warm environments.
        for replica in range(min(job.copies, self.pool.size)):
            self._deliver_tick(state, replica)

    def _deliver_tick(self, state: _TickState, replica: int | None) -> None:
        state.in_flight += 1
        state.facts.deliveries += 1
        event = scheduled_event(state.facts.job, state.when)
        self._submit(state.function, event, partial(self._tick_done, state), replica=replica)

    def _tick_done(self, state: _TickState, result: InvocationResult) -> None:
        state.in_flight -= 1
        if result.crashed:
            state.facts.statuses["crashed"] += 1
        elif not result.ok or not isinstance(result.response, dict):
            state.facts.statuses["error"] += 1
            state.errors += 1
        else:
            status = str(result.response.get("status"))
            state.facts.statuses[status] += 1
            token = result.response.get("token")
            if isinstance(token, int):
                state.facts.tokens.append((status, token))
            if status == "ran" or (status == "skipped" and result.response.get("reason") == "completed"):
                state.resolved = True
        if state.resolved:
            if not state.late_duplicate_sent and state.in_flight == 0:
                state.late_duplicate_sent = True  # a duplicate that arrives after completion
                self._deliver_tick(state, None)
            return
        if state.errors > 2:
            state.given_up = True
        elif state.in_flight == 0:
            # Nobody finished the tick (a run died, or its lock is still held by
            # a dead run): retry it until a run gets the lease after it expired.
            self._later(TICK_RETRY_DELAY, partial(self._deliver_tick, state, None))

    # -- the loop ------------------------------------------------------------------
    def step(self, *, feed_cron: bool, timeout: float = 0.05) -> None:
        """Handle finished invocations, run due delayed actions, send what is ready."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                result, on_done = self._results.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.invocations.append(InvocationFacts(result.replica, result.invocation.function,
                                                    result.finished, result.crashed, result.ok, result.metrics))
            if not result.ok and not result.crashed:
                self.errors[f"{result.invocation.function}: {result.error}"] += 1
            on_done(result)
        now = time.monotonic()
        while self._delayed and self._delayed[0][0] <= now:
            heapq.heappop(self._delayed)[2]()
        self._pump_sqs()
        if now >= self._next_retry_tick:
            self._next_retry_tick = now + RETRY_TICK_EVERY
            self._fire_retry_tick()
        if feed_cron:
            self._feed_cron(now)

    def _feed_cron(self, now: float) -> None:
        if not self._cron_queue and self._cron_jobs and all(s.settled for s in self._ticks.values()):
            job = self._cron_jobs.popleft()
            if job.before is not None:
                job.before()  # e.g. the payments API goes down for the jobs that follow
            self._cron_queue.extend((job, when) for when in job.ticks)
        if self._cron_queue and now >= self._next_cron:
            self._next_cron = now + self.cron_every
            job, when = self._cron_queue.popleft()
            self._fire_cron(job, when)

    @property
    def cron_done(self) -> bool:
        return not self._cron_jobs and not self._cron_queue and all(s.settled for s in self._ticks.values())

    @property
    def idle(self) -> bool:
        return not self._pending and not self._batches_in_flight and not self._delayed and self.cron_done

    @property
    def ticks(self) -> list[TickFacts]:
        return [s.facts for s in self._ticks.values()]

    @property
    def cron_progress(self) -> tuple[int, int]:
        total = sum(len(job.ticks) for job in self.cron_jobs)
        return sum(1 for s in self._ticks.values() if s.settled), total
