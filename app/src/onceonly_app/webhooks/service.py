"""Dispatch and retry orchestration: who may attempt a delivery, and what its
outcome does to the delivery record and the due queue.

- Dispatch (SQS): the invocation whose INSERT created the delivery makes the
  first attempt with fencing token 0, after putting a safety net in the due
  queue (due when its attempt lease runs out), so a crash never loses it.
- Retry (schedule): any number of workers claim due deliveries from the queue;
  each claim stamps its token on the delivery before attempting, and every write
  recording an outcome must still match that token.
- Every attempt is counted when it starts (start_attempts), so a delivery whose
  attempts crash the worker still runs out of attempts and dead-letters; one
  claim that fails does not stop the run, only an unavailable store does.
- An attempt's DNS lookup has a deadline of attempt_budget, and its request
  another, started once the endpoint admitted it (waiting for admission is
  not the request's time). It is only started when its holder's window (the
  claim's lease, or the dispatcher's safety net, and the invocation's time)
  has that much left, and checked again after admission: a request that
  would outlive the window is not sent (AttemptWindow).
- The claims of one batch are attempted concurrently (max_in_flight at once,
  lanes.py), each with its own fence, outcome and report.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any

from psycopg_pool import ConnectionPool

from onceonly import Claim, Queue, QueueDepth
from onceonly.errors import StoreUnavailableError
from onceonly_app.runtime.budget import Budget

from . import deliveries
from .backoff import RetryPolicy, parse_retry_after
from .config import WebhookConfig
from .deliveries import AttemptInput, Outcome, Recorded, Subscription, delivery_id_for
from .endpoint_health import EndpointHealth
from .endpoint_limits import DEFER_RETENTION, HELD_BACK_DELAY, Admission, EndpointGate
from .endpoint_settings import request_headers
from .lanes import in_background, run_in_lanes
from .messages import DeliveryRequest, MalformedMessageError
from .sender import SendResult, WebhookSender
from .signing import signed_headers
from .ssrf import Resolver, Target, UnresolvableHostError, UnsafeTargetError, check_target
from .urls import UnencodableURLError

# Statuses a queue item has nothing left to do for: finished, or held (enabling
# the subscription queues the delivery again, subscriptions.enable).
OFF_QUEUE = frozenset({"succeeded", "dead", "held", "expired", "dropped", "aborted"})
DISPATCH_TOKEN = 0  # queue items start at token 0; a claim's token is always >= 1
DUPLICATE = "duplicate"
GONE_REASON = "410 Gone from the endpoint"  # the subscription's disabled_reason
HELD_ERROR = "subscription disabled: held until it is enabled"
ABORTED = "aborted by the receiver (webhook-delivery: abort-message): not retried"
HELD_BACK = "held back by the endpoint's limit (in flight or per second): delayed, no attempt used"
HELD_BEHIND = "held back behind an earlier record of its lane: delayed, no attempt used"
ADMITTED_LATE = ("admitted too late: the request would outlive the holder's lease or the invocation; "
                 "delayed, no attempt used")
LANE_SPACING = 0.001  # seconds between the due times of a lane's records held back behind one another


class UnknownWebhookError(MalformedMessageError):
    """The message names a subscription that does not exist."""


@dataclass(frozen=True)
class AttemptWindow:
    """Until when a holder's request may run: its lease (a claim's, or the
    dispatcher's safety net, epoch seconds on the service's clock), and the
    invocation's time. Past the lease another worker takes the delivery and
    POSTs it again."""

    lease_ends_at: float
    budget: Budget | None = None

    def fits(self, now: float, seconds: float) -> bool:
        """Whether a request of up to ``seconds`` started ``now`` ends inside both."""
        return self.lease_ends_at - now > seconds and (self.budget is None or self.budget.allows(seconds))


@dataclass
class Started:
    """A record of an SQS batch after start_batch: its delivery created, its
    safety net queued, its first attempt counted (``delivery``; None: fenced
    off before it started, a retry worker took it)."""

    delivery_id: str
    window: AttemptWindow
    started_at: float
    delivery: AttemptInput | None = None
    admitted: Admission | None = None  # taken with the batch's (start_batch's ``admit``)


@dataclass(frozen=True)
class ClaimAttempt:
    """A claim of a retry batch after its phase 1: stamped and started
    (``delivery``), or out of attempts (``outcome`` decided, no request)."""

    claim: Claim
    window: AttemptWindow
    started_at: float
    delivery: AttemptInput | None
    webhook_id: str
    outcome: Outcome | None = None


class DeadlineNearError(Exception):
    """Too little invocation time is left to make an attempt within its deadline,
    so the record was not started (nothing was written): it fails in its batch
    and SQS brings it back, instead of the invocation timing out mid-attempt."""


@dataclass(frozen=True)
class AttemptReport:
    delivery_id: str
    webhook_id: str
    outcome: str  # succeeded | failed | gone | refused | disabled | dropped | aborted
    #               | deferred (endpoint at its limit)
    status: str  # the status written (if recorded; else the one the attempt wanted)
    recorded: bool  # False: refused by the fence (a newer holder owns the delivery)
    attempt: int | None
    response_code: int | None
    next_attempt_at: float | None
    auto_disabled: bool = False  # this attempt's failure disabled its subscription (endpoint_health.py)


@dataclass(frozen=True)
class DispatchResult:
    delivery_id: str
    kind: str  # attempted | duplicate | rearmed (an untouched delivery's safety net, see _duplicate)
    #            | fenced (a retry worker took the delivery before the first attempt started)
    attempt: AttemptReport | None = None


@dataclass
class RetryReport:
    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    held: int = 0  # the subscription is disabled: kept until it is enabled, not attempted
    dropped: int = 0  # the subscription was deleted
    aborted: int = 0  # the receiver answered webhook-delivery: abort-message
    auto_disabled: int = 0  # subscriptions disabled automatically: every attempt failed for the period
    deferred: int = 0  # held back by the endpoint's limit: delayed, no attempt used
    claims_contended: int = 0  # ack/retry refused: the item was re-granted meanwhile
    leases_reclaimed: int = 0  # the previous holder never recorded its outcome
    fenced_writes_refused: int = 0  # stamp or record refused: a newer holder exists
    finished_elsewhere: int = 0  # claimed, but already succeeded/dead: acked
    handed_back: int = 0  # claimed too close to the deadline: given back, due now
    claims_failed: int = 0  # raised while handled: left to its lease, the rest of the run went on
    queue_depth: QueueDepth | None = None
    attempts: list[AttemptReport] = field(default_factory=list)

    def add(self, other: RetryReport) -> None:
        """Count ``other`` (one claim's report, made in its own thread) into this one."""
        for name in COUNTED:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.attempts.extend(other.attempts)

    def count(self, report: AttemptReport) -> None:
        self.attempts.append(report)
        self.auto_disabled += report.auto_disabled
        if not report.recorded:
            self.fenced_writes_refused += 1
        elif report.outcome == "deferred":
            self.deferred += 1
        elif report.status == "succeeded":
            self.succeeded += 1
        elif report.status == "dead":
            self.dead += 1
        elif report.status == "held":
            self.held += 1
        elif report.status == "dropped":
            self.dropped += 1
        elif report.status == "aborted":
            self.aborted += 1
        else:
            self.failed += 1


class WebhookService:
    def __init__(self, pool: ConnectionPool, queue: Queue, sender: WebhookSender, config: WebhookConfig,
                 *, logger: logging.Logger | Any | None = None, clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None, resolver: Resolver | None = None,
                 gate: EndpointGate | None = None, health: EndpointHealth | None = None) -> None:
        self.pool = pool  # the domain database: each delivery statement in its own short transaction
        self.queue = queue
        self.sender = sender
        self.config = config
        self.log = logger or logging.getLogger(__name__)
        self.clock = clock
        self.policy = RetryPolicy(config.retry_schedule, config.max_retry_after, rng)
        self.resolver = resolver
        self.gate = gate  # per-endpoint limits; None: unlimited
        self.health = health  # failing endpoints disabled, notices sent; None: not tracked

    # -- dispatch -------------------------------------------------------------
    def invocation_budget(self, context: Any) -> Budget:
        """A Lambda invocation's time, WEBHOOK_DEADLINE_MARGIN_SECONDS kept back for recording and acking."""
        return Budget.of_lambda(context, reserve=self.config.deadline_margin)

    def has_time_for_attempt(self, budget: Budget, *, after: float = 0.0) -> bool:
        """Whether an attempt started now (or ``after`` seconds from now) ends
        (deadline) with the margin still left."""
        return budget.allows(after + self.config.attempt_budget)

    def dispatch(self, request: DeliveryRequest, budget: Budget | None = None, *,
                 behind: float | None = None) -> DispatchResult:
        """Create the delivery of ``request`` and make its first attempt, once:
        a batch of one (start_batch, try_started, finish_batch).
        ``behind``: an earlier record of its lane was held back by the endpoint's
        limit, due then; this one makes no attempt and is held back right
        behind it, so it cannot overtake it.
        Raises UnknownWebhookError (the record fails alone and goes to the DLQ),
        DeadlineNearError before doing anything if ``budget`` leaves too
        little time, StoreUnavailableError if a store cannot be reached."""
        (start,) = self.start_batch([request], budget)
        if isinstance(start, Exception):
            raise start
        if isinstance(start, DispatchResult):
            return start
        tried = self.try_started(start, behind)
        if isinstance(tried, DispatchResult):
            return tried
        (result,) = self.finish_batch([(start, tried)])
        return result

    def start_batch(self, requests: Sequence[DeliveryRequest], budget: Budget | None = None, *,
                    lease_ends_by: float | None = None,
                    admit: Collection[int] = ()) -> list[Started | DispatchResult | Exception]:
        """Phase 1 of an SQS batch, one round trip each for all its records: the
        deliveries' INSERT (which also says which subscriptions exist), their safety nets, and the
        first attempts' start (counted, fenced at token 0). Per request, in
        order: its Started delivery, a DispatchResult ("duplicate" is decided
        per record later, by try_started), or the exception that record fails
        with (UnknownWebhookError, DeadlineNearError, StoreUnavailableError
        for each new delivery when the queue or its start fails). Raises
        StoreUnavailableError when the domain database fails the lookup or
        the INSERT. A delivery created before an outage is a duplicate when SQS
        brings its record back, and re-arms its safety net. ``lease_ends_by``:
        the batch's first safety net, for a record started after phase 1 (its
        outcome is recorded with the batch's, so its request must end by then).
        ``admit``: the indexes of the requests that start at once: their new
        deliveries are admitted together (EndpointGate.admit_many) on a worker
        thread while the safety nets and the starts are written, and each
        Started keeps its admission (``admitted``) for try_started."""
        if budget is not None and not self.has_time_for_attempt(budget):
            near = DeadlineNearError(f"{budget.left():.1f} s left after the margin, an attempt needs up to "
                                     f"{self.config.attempt_budget:g} s")
            return [near] * len(requests)
        with deliveries.connection(self.pool) as conn:  # one statement: the subscriptions known, the deliveries created
            made = deliveries.create_many(conn, requests)
        known, created = made.known_webhooks, made.delivery_ids
        # The safety nets first: if this invocation dies from here on, a retry
        # worker claims each delivery when its lease runs out.
        window = AttemptWindow(min(self.clock() + self.config.attempt_lease, lease_ends_by or math.inf), budget)
        first: dict[str, int] = {}  # a delivery listed twice is created by its first record
        out: list[Started | DispatchResult | Exception] = []
        for n, request in enumerate(requests):
            delivery_id = delivery_id_for(request.webhook_id, request.event_id)
            if request.webhook_id not in known:
                out.append(UnknownWebhookError(f"unknown webhook_id {request.webhook_id!r}"))
            elif delivery_id in created and first.setdefault(delivery_id, n) == n:
                out.append(Started(delivery_id, window, 0.0))
            else:
                out.append(DispatchResult(delivery_id, DUPLICATE))
        fresh = [start for start in out if isinstance(start, Started)]
        admitting = self._admit_early([(start.delivery_id, requests[n].webhook_id) for n, start in enumerate(out)
                                       if n in admit and isinstance(start, Started)], made.limits)
        try:
            self.queue.put_many([(s.delivery_id, window.lease_ends_at, {"generation": 0}) for s in fresh])
            started_at = self.clock()
            with deliveries.connection(self.pool) as conn:
                begun = deliveries.start_attempts(conn, [(s.delivery_id, 0, DISPATCH_TOKEN) for s in fresh],
                                                  self.policy.max_attempts)
        except StoreUnavailableError as exc:
            self.finish_returns(admitting.result().values() if admitting else ())
            # Only the new deliveries fail: a duplicate or an unknown webhook needs no more.
            return [exc if isinstance(start, Started) else start for start in out]
        admitted = admitting.result() if admitting else {}
        for start in fresh:
            start.started_at, start.delivery = started_at, begun.get(start.delivery_id)
            start.admitted = admitted.get(start.delivery_id)
        return out

    def _admit_early(self, wanted: Sequence[tuple[str, str]],
                     limits: dict[str, tuple[int, float]]) -> Future[dict[str, Admission]] | None:
        """_admissions on a worker thread. None without a gate or anything to admit.
        A delivery admitted here and not sent after all (a tenant mismatch, a
        fence) gives its admission back at the batch's end (finish_returns)."""
        wanted = [(delivery_id, webhook_id) for delivery_id, webhook_id in wanted if webhook_id in limits]
        if self.gate is None or not wanted:
            return None
        return in_background(lambda: self._admissions(wanted, limits))

    def _admissions(self, wanted: Sequence[tuple[str, str]],
                    limits: dict[str, tuple[int, float]]) -> dict[str, Admission]:
        """Admissions of the ``(delivery_id, webhook_id)`` (whose subscriptions'
        ``(max_in_flight, rate_per_second)`` are ``limits``), taken together:
        one round trip per limit (EndpointGate.admit_many); by delivery id. On
        an outage none: each request then meets it alone, as it would have."""
        if self.gate is None or not wanted:
            return {}
        try:
            admissions = self.gate.admit_many([(webhook_id, *limits[webhook_id]) for _, webhook_id in wanted])
        except StoreUnavailableError:
            return {}
        return {delivery_id: admission for (delivery_id, _), admission in zip(wanted, admissions, strict=True)}

    def admit_together(self, deliveries: Sequence[AttemptInput]) -> dict[str, Admission]:
        """Admissions, by delivery id, for requests about to be made at once (the
        first of a claimed batch): only for a delivery that would be sent. The
        caller passes each to _try and gives the batch's to finish_returns."""
        sendable = [d for d in deliveries if self._unsendable(d) is None]
        return self._admissions([(d.id, d.subscription.id) for d in sendable],
                                {d.subscription.id: (d.subscription.max_in_flight, d.subscription.rate_per_second)
                                 for d in sendable})

    def finish_returns(self, admissions: Iterable[Admission | None]) -> None:
        """At a batch's end: give back the permits of admissions no request used
        (released ones are skipped), and see every permit the batch's requests
        gave back later through (EndpointGate.release)."""
        if self.gate is not None:
            for admission in admissions:
                if admission is not None:
                    self.gate.release(admission, later=True)
            self.gate.returns.wait()

    def try_started(self, start: Started | DispatchResult, behind: float | None = None,
                    later: bool = False) -> Outcome | DispatchResult:
        """Phase 2, one record (concurrently with the others): the request, or
        the decision not to make it, with its admission if start_batch took
        one. ``behind``: see dispatch; ``later``: its permit is given back on
        the returns thread (the batch's end waits for it: finish_returns).
        A duplicate's DispatchResult is decided here; so is a fenced one."""
        if isinstance(start, DispatchResult):
            return self._duplicate(start.delivery_id)
        if start.delivery is None:
            return DispatchResult(start.delivery_id, "fenced")  # a retry worker owns it (and the queue item)
        if behind is not None:
            # Once a lane's record is held back, the rest of the lane waits behind
            # it, in batch order (a retry worker claims the earliest due first).
            return Outcome("deferred", "retrying", None, HELD_BEHIND, max(behind, self.clock()) + LANE_SPACING)
        return self._try(start.delivery, start.window, start.admitted, later)

    def finish_batch(self, tried: Sequence[tuple[Started, Outcome]]) -> list[DispatchResult]:
        """Phase 3: record every outcome (one statement for the ordinary ones),
        then move the queue items: due again for a retrying delivery (one
        put_many), removed for a finished one (one cancel_many; one read puts
        back any re-queued since its outcome). A delivery whose outcome the
        fence refused belongs to a retry worker that reclaimed it (we outlived
        our lease): its queue item is that worker's, so it is left alone."""
        reports = self._record_all([(s.delivery_id, 0, DISPATCH_TOKEN, s.delivery, outcome, s.started_at,
                                     s.delivery.webhook_id if s.delivery else "") for s, outcome in tried])
        recorded = [r for r in reports if r.recorded]
        self.queue.put_many([(r.delivery_id, r.next_attempt_at, {"generation": 0})
                             for r in recorded if r.status == "retrying"])
        finished = [r.delivery_id for r in recorded if r.status != "retrying"]
        if finished:
            self.queue.cancel_many(finished)
            # The removal is by id: a recover, redrive or enable that re-queued one
            # of them since its outcome (a new generation) must keep its item.
            self._requeue_released(finished)
        return [DispatchResult(r.delivery_id, "attempted", r) for r in reports]

    def _duplicate(self, delivery_id: str) -> DispatchResult:
        with deliveries.connection(self.pool) as conn:
            created_at = deliveries.untouched_since(conn, delivery_id)
        if created_at is not None:
            # Its creator may have died between the INSERT and queueing the safety
            # net, and this message may be the last one SQS brings for the event,
            # however soon after the crash that is. Re-arm the net for when the
            # creator's own would come due: a live creator's outcome replaces it,
            # a dead one's delivery is claimed then. Never rely on SQS timing.
            self.queue.put(delivery_id, due_at=created_at + self.config.attempt_lease, payload={"generation": 0})
            self.log.info("duplicate message: safety net re-armed", extra={"delivery_id": delivery_id})
            return DispatchResult(delivery_id, "rearmed")
        self.log.info("duplicate message: delivery exists", extra={"delivery_id": delivery_id})
        return DispatchResult(delivery_id, "duplicate")

    # -- retry ----------------------------------------------------------------
    def run_retries(self, budget: Budget) -> RetryReport:
        """Claim due deliveries in batches and attempt them until nothing is due or
        the invocation nears its deadline. Safe on any number of concurrent workers:
        the queue hands each due item to one claimer, and the fence refuses the
        writes of a holder whose lease was reclaimed."""
        report = RetryReport()
        while self.has_time_for_attempt(budget):
            claims = self.queue.claim(limit=self.config.claim_batch, lease=self.config.attempt_lease)
            if not claims:
                break
            report.claimed += len(claims)
            to_ack: list[Claim] = []
            released: list[str] = []
            outage = self._process_claims(claims, budget, report, to_ack, released)
            # The finished claims are acked even when a store outage ends the
            # run: the outage's own claims come back when their leases end.
            if to_ack:
                report.claims_contended += self.queue.ack_many(to_ack).count(False)
            if released and outage is None:
                self._requeue_released(released)
            if outage is not None:
                raise outage
        report.queue_depth = self.queue.depth()
        return report

    def _process_claims(self, claims: list[Claim], budget: Budget, report: RetryReport,
                        to_ack: list[Claim], released: list[str]) -> StoreUnavailableError | None:
        """Process one claimed batch in three phases, as the dispatcher does: the
        fence stamps and the attempts' start for every claim (one statement
        each), the requests concurrently (max_in_flight at once, every claim its
        own lane: retries keep no order, docs/webhooks.md), then every outcome
        (one statement for the ordinary ones). A claim whose request raises is
        counted and left to its lease; the run goes on. Once a store is
        unavailable, the claims not done are left to their leases (their
        attempts, if started, were counted); returns that outage."""
        try:
            started = self._start_claims(claims, budget, report, to_ack, released)
        except StoreUnavailableError as exc:
            return exc
        except Exception:  # noqa: BLE001 - the batch's leases bring its claims back; the run goes on
            report.claims_failed += len(claims)
            self.log.exception("claimed batch not started; its claims are retried when their leases end",
                               extra={"claims": len(claims)})
            return None
        outage: list[StoreUnavailableError] = []
        # Every claim is its own lane: the first max_in_flight start at once.
        admissions = self.admit_together([item.delivery for item in started[:self.config.max_in_flight]
                                          if item.outcome is None and item.delivery is not None])
        # An endpoint's last claim of the batch gives its permit back on the returns
        # thread (beside phase 3); an earlier one at once, as a later claim may need the place.
        last_of_endpoint = set({item.webhook_id: id(item) for item in started}.values())

        def attempt(item: ClaimAttempt) -> Outcome | None:
            if item.outcome is not None:
                return item.outcome  # decided without a request (out of attempts)
            if outage or item.delivery is None:
                return None
            try:
                return self._try(item.delivery, item.window, admissions.get(item.delivery.id),
                                 later=id(item) in last_of_endpoint)
            except StoreUnavailableError as exc:
                outage.append(exc)
                return None

        tried: list[tuple[ClaimAttempt, Outcome]] = []
        try:
            futures = run_in_lanes(started, lambda item: item.claim.item_id, attempt, self.config.max_in_flight)
            for item, future in zip(started, futures, strict=True):
                failure = future.exception()
                if failure is not None:  # one bad claim must not cost the others
                    report.claims_failed += 1
                    self.log.error("claim failed; it is retried when its lease ends", exc_info=failure,
                                   extra={"delivery_id": item.claim.item_id, "token": item.claim.token})
                elif (outcome := future.result()) is not None:
                    tried.append((item, outcome))
            try:
                self._finish_claims(tried, report, to_ack, released)
            except StoreUnavailableError as exc:
                outage.append(exc)
        finally:
            self.finish_returns(admissions.values())  # the permits' returns ran beside the outcomes' recording
        return outage[0] if outage else None

    def _start_claims(self, claims: list[Claim], budget: Budget, report: RetryReport, to_ack: list[Claim],
                      released: list[str]) -> list[ClaimAttempt]:
        """Phase 1 of a claimed batch: hand back the claims too late to finish
        inside the deadline or their lease, stamp the others' fences, and start
        (count) their attempts. The claims that may go on, in order."""
        now = self.clock()
        ready: list[tuple[Claim, AttemptWindow]] = []
        for claim in claims:
            window = AttemptWindow(claim.lease_expires_at, budget)
            if window.fits(now, self.config.attempt_budget):
                ready.append((claim, window))
            # Too late to finish inside the deadline or the lease: hand it
            # back now instead of leaving it locked until the lease ends.
            elif self.queue.retry(claim, due_at=now):
                report.handed_back += 1
            else:
                report.claims_contended += 1
        with deliveries.connection(self.pool) as conn:
            previous = deliveries.stamp_fences(conn, [(c.item_id, _generation_of(c), c.token) for c, _ in ready])
        stamped: list[tuple[Claim, AttemptWindow]] = []
        for claim, window in ready:
            was = previous.get(claim.item_id)
            if was is None:
                self._not_stamped(claim, report, to_ack, released)
                continue
            if was in ("pending", "attempting"):
                report.leases_reclaimed += 1
                self.log.info("lease reclaimed: the previous holder never recorded an outcome",
                              extra=_claim_context(claim))
            stamped.append((claim, window))
        started_at = self.clock()
        with deliveries.connection(self.pool) as conn:
            begun = deliveries.start_attempts(conn, [(c.item_id, _generation_of(c), c.token) for c, _ in stamped],
                                              self.policy.max_attempts)
        started = []
        for claim, window in stamped:
            delivery = begun.get(claim.item_id)
            if delivery is not None:
                started.append(ClaimAttempt(claim, window, started_at, delivery, delivery.webhook_id))
            elif (exhausted := self._exhausted(claim)) is not None:
                started.append(ClaimAttempt(claim, window, started_at, None, *exhausted))
            else:
                report.fenced_writes_refused += 1  # a newer holder stamped between our stamp and our start
        return started

    def _not_stamped(self, claim: Claim, report: RetryReport, to_ack: list[Claim], released: list[str]) -> None:
        """The fence refused a claim's stamp: finished (or redriven) elsewhere,
        then its queue item has nothing left to do; else a newer holder has it."""
        generation = _generation_of(claim)
        with deliveries.connection(self.pool) as conn:
            state = deliveries.state(conn, claim.item_id)
        if state is None or state["generation"] > generation or state["status"] in OFF_QUEUE:
            report.finished_elsewhere += 1
            to_ack.append(claim)  # nothing left to do for this queue item
            if state is not None and state["generation"] > generation:
                released.append(claim.item_id)
        else:
            report.fenced_writes_refused += 1
            self.log.warning("claim fenced off: a newer holder stamped the delivery",
                             extra={**_claim_context(claim), "fence_token": state["fence_token"]})

    def _exhausted(self, claim: Claim) -> tuple[str, Outcome] | None:
        """start_attempts refused a stamped claim: if every allowed attempt has
        started (and this holder still owns the delivery), its webhook and the
        outcome that records it dead, without a request; else None (fenced)."""
        with deliveries.connection(self.pool) as conn:
            state = deliveries.state(conn, claim.item_id)
        if state is None or not self._out_of_attempts(state, _generation_of(claim), claim.token):
            return None
        return str(state["webhook_id"]), Outcome("failed", "dead", None, (
            f"no outcome was recorded for the last of {self.policy.max_attempts} attempts (the worker "
            "died, timed out or could not read the response); not retried"), None)

    def _finish_claims(self, tried: list[tuple[ClaimAttempt, Outcome]], report: RetryReport,
                       to_ack: list[Claim], released: list[str]) -> None:
        """Phase 3 of a claimed batch: record every outcome, then put the
        retrying ones back for their next time; the others are acked by the
        caller (ack_many). ``released`` gets the deliveries whose ack may remove
        the queue item an enable meant for their release (see _requeue_released)."""
        reports = self._record_all([(item.claim.item_id, _generation_of(item.claim), item.claim.token,
                                     item.delivery, outcome, item.started_at, item.webhook_id)
                                    for item, outcome in tried])
        for (item, _), attempt in zip(tried, reports, strict=True):
            report.count(attempt)
            if not attempt.recorded:
                continue
            if attempt.status == "retrying":
                due = attempt.next_attempt_at if attempt.next_attempt_at is not None else self.clock()
                if not self.queue.retry(item.claim, due_at=due):
                    report.claims_contended += 1
                continue
            to_ack.append(item.claim)
            if attempt.status == "held":
                released.append(item.claim.item_id)

    def _requeue_released(self, delivery_ids: list[str]) -> None:
        """After removing the queue items of ``delivery_ids``: queue those made
        ``retrying`` again meanwhile (an enable's release, a recover, a
        redrive). Their item was the one this worker was about to remove (a
        hold recorded, or an older generation's item), so once it is removed
        they would have none. Put if absent: an item put since is left alone."""
        with deliveries.connection(self.pool) as conn:
            rows = deliveries.retrying(conn, delivery_ids)
        if rows:
            now = self.clock()
            self.queue.put_if_absent([(delivery_id, now, {"generation": generation})
                                      for delivery_id, generation in rows])

    # -- one attempt ------------------------------------------------------------
    # -- recording ----------------------------------------------------------
    def _record_all(self, items: Sequence[tuple[str, int, int, AttemptInput | None, Outcome, float, str]]
                    ) -> list[AttemptReport]:
        """Record each ``(delivery_id, generation, token, delivery, outcome,
        started_at, webhook_id)`` (distinct ids), fenced on its own: the
        ordinary outcomes in one statement, a deferral or a hold each in its
        own (they are decided under locks of their own). Reports in order."""
        plain = [(i, g, t, o, started) for i, g, t, _, o, started, _ in items
                 if o.outcome != "deferred" and o.status != "held"]
        with deliveries.connection(self.pool) as conn:
            recorded = deliveries.record_many(conn, plain)
        reports = []
        for delivery_id, generation, token, delivery, outcome, started, webhook_id in items:
            if outcome.outcome == "deferred":
                with deliveries.connection(self.pool) as conn:
                    recorded[delivery_id] = deliveries.defer(conn, delivery_id, generation, token,
                                                             outcome.next_attempt_at or self.clock(), DEFER_RETENTION)
            elif outcome.status == "held":
                # Decided again under the subscription's lock: a 410 only disables the
                # URL that answered it, and an enable meanwhile means retry now.
                gone_url = delivery.subscription.url if delivery is not None and outcome.outcome == "gone" else None
                with deliveries.connection(self.pool) as conn:
                    recorded[delivery_id] = deliveries.record_held(conn, delivery_id, generation, token, webhook_id,
                                                                   outcome, started, gone_url, GONE_REASON)
            reports.append(self._report(delivery_id, generation, token, delivery, outcome, webhook_id,
                                        recorded[delivery_id]))
        return reports

    def _report(self, delivery_id: str, generation: int, token: int, delivery: AttemptInput | None,
                outcome: Outcome, webhook_id: str, recorded: Recorded) -> AttemptReport:
        auto_disabled = False
        if recorded.recorded and delivery is not None:
            auto_disabled = self._note_health(delivery, generation, outcome, recorded)
        report = AttemptReport(
            delivery_id, webhook_id, outcome.outcome, recorded.status, recorded.recorded,
            recorded.attempt, outcome.response_code, recorded.next_attempt_at, auto_disabled)
        if self.log.isEnabledFor(logging.INFO if recorded.recorded else logging.WARNING):
            self.log.log(
                logging.INFO if recorded.recorded else logging.WARNING,
                "attempt recorded" if recorded.recorded else "attempt outcome refused by the fence",
                extra={"delivery_id": delivery_id, "webhook_id": webhook_id, "token": token,
                       "generation": generation, "attempt": recorded.attempt, "outcome": outcome.outcome,
                       "status": recorded.status, "response_code": outcome.response_code,
                       "error": outcome.error},
            )
        return report

    def _note_health(self, delivery: AttemptInput, generation: int, outcome: Outcome, recorded: Recorded) -> bool:
        """After a recorded outcome: a success ends the subscription's failing
        period, a failure counts toward its automatic disable, a delivery out of
        attempts is announced. Whether this disabled the subscription. A failure
        here is logged, never the attempt's: its outcome is already recorded."""
        if self.health is None:
            return False
        subscription = delivery.subscription
        try:
            if outcome.outcome == "succeeded":
                self.health.succeeded(subscription.id, subscription.failing_since)
                return False
            if outcome.outcome != "failed" or not subscription.enabled:
                return False
            if recorded.status == "dead":
                self.health.exhausted(delivery.id, generation, str(delivery.tenant_id), subscription.id,
                                      delivery.event_id, delivery.event_type, outcome.response_code, outcome.error)
            return self.health.failed(subscription.id, subscription.failing_since) is not None
        except StoreUnavailableError:
            raise
        except Exception:  # noqa: BLE001 - the attempt's outcome stands; the bookkeeping is retried next failure
            self.log.exception("endpoint health not updated", extra={"delivery_id": delivery.id,
                                                                     "webhook_id": subscription.id})
            return False

    def _out_of_attempts(self, state: dict[str, Any], generation: int, token: int) -> bool:
        """start_attempts refused: is it because every allowed attempt has started
        (and this holder still owns the delivery), rather than a newer holder?"""
        return (state["generation"] == generation and state["fence_token"] == token
                and state["status"] in ("pending", "attempting")
                and state["attempts"] >= self.policy.max_attempts)

    def _unsendable(self, delivery: AttemptInput) -> Outcome | None:
        """The outcome of a delivery that is not to be sent at all, else None."""
        subscription = delivery.subscription
        if subscription.deleted:
            return Outcome("dropped", "dropped", None, "subscription deleted", None)
        if subscription.tenant_id is None or delivery.tenant_id != subscription.tenant_id:
            # An event goes to its own tenant's subscriptions only; a delivery
            # that would cross (from before tenants, or a subscription moved to
            # another tenant) is refused, kept and listed as dead.
            why = "the subscription has no tenant" if subscription.tenant_id is None else \
                "the event belongs to another tenant than the subscription"
            return Outcome("refused", "dead", None, f"refused: {why}", None)
        if not subscription.enabled:
            # Kept, not attempted: enabling the subscription delivers it (no event is lost).
            return Outcome("disabled", "held", None, HELD_ERROR, None)
        return None

    def _try(self, delivery: AttemptInput, window: AttemptWindow, admitted: Admission | None = None,
             later: bool = False) -> Outcome:
        """Make the request (or decide not to) and say what it means.
        ``admitted``: an admission taken before (admit_together); given back
        here whatever happens (``later``: on the returns thread)."""
        try:
            return self._try_admitted(delivery, window, admitted, later)
        finally:
            if admitted is not None and self.gate is not None:
                self.gate.release(admitted, later)

    def _try_admitted(self, delivery: AttemptInput, window: AttemptWindow, admitted: Admission | None,
                      later: bool) -> Outcome:
        unsendable = self._unsendable(delivery)
        if unsendable is not None:
            return unsendable
        subscription = delivery.subscription
        try:
            target = check_target(subscription.url, self.config.allow_http_hosts, self.resolver,
                                  Budget.after(self.config.attempt_budget))
        except UnsafeTargetError as exc:
            return Outcome("refused", "dead", None, f"refused by the SSRF guard: {exc}", None)
        except UnresolvableHostError as exc:
            return self._failure(SendResult(None, str(exc)), delivery.attempt)
        except UnencodableURLError as exc:
            # A URL stored before add/update encoded URLs: a failed attempt with its reason.
            return self._failure(SendResult(None, f"URL cannot be sent: {exc}"), delivery.attempt)
        in_window = False
        with self._admitted(subscription, admitted, later) as admission:
            # The request's deadline starts now, so it must still end inside the
            # window: else leaving (releasing the admission) sends nothing.
            in_window = bool(admission) and window.fits(self.clock(), self.config.attempt_budget)
            if in_window:
                result = self._send(delivery, target, Budget.after(self.config.attempt_budget))
        if admission and not in_window:
            # Not due at once: a retry run would claim it again in its next batch.
            # (Without a gate, a slow DNS lookup can have used the window up.)
            delay = self.gate.in_flight_delay(delivery.deferrals) if self.gate else HELD_BACK_DELAY[1]
            due = self.clock() + delay
            return Outcome("deferred", "retrying", None, ADMITTED_LATE, due)
        if not admission:
            assert self.gate is not None
            due = self.gate.held_back_until(subscription.id, admission, subscription.rate_per_second,
                                            delivery.deferrals, self.clock())
            return Outcome("deferred", "retrying", None, HELD_BACK, due)
        if result.ok:
            return Outcome("succeeded", "succeeded", result.status_code, None, None)
        if result.aborted:
            return Outcome("aborted", "aborted", result.status_code, f"{ABORTED}; {result.error}", None)
        if result.status_code == 410:
            return Outcome("gone", "held", 410, "410 Gone: subscription disabled, held until it is enabled", None)
        return self._failure(result, delivery.attempt)

    def _send(self, delivery: AttemptInput, target: Target, deadline: Budget) -> SendResult:
        body = delivery.body()
        subscription = delivery.subscription
        headers = request_headers(subscription.headers,
                                  signed_headers(subscription.signing_secrets, delivery.id, body, self.clock()))
        return self.sender.post(target, body, headers, deadline)

    @contextmanager
    def _admitted(self, subscription: Subscription, admitted: Admission | None,
                  later: bool) -> Iterator[Admission]:
        """Whether the endpoint's limits let this request go now (holding its
        in-flight permit while it runs): ``admitted`` if taken before, else
        asked now; always, without a gate."""
        if self.gate is None:
            yield Admission(True)
            return
        with self.gate.admit(subscription.id, subscription.max_in_flight, subscription.rate_per_second,
                             admitted, later) as ok:
            yield ok

    def _failure(self, result: SendResult, attempts_made: int) -> Outcome:
        retry_after = parse_retry_after(result.retry_after, self.clock(), self.config.max_retry_after)
        delay = self.policy.next_delay(attempts_made, retry_after)
        if delay is None:
            return Outcome("failed", "dead", result.status_code,
                           f"{result.error} (last of {self.policy.max_attempts} attempts)", None)
        return Outcome("failed", "retrying", result.status_code, result.error, self.clock() + delay)


COUNTED = tuple(f.name for f in fields(RetryReport) if f.type == "int")


def _claim_context(claim: Claim) -> dict[str, Any]:
    return {"delivery_id": claim.item_id, "token": claim.token, "generation": _generation_of(claim)}


def _generation_of(claim: Claim) -> int:
    payload = claim.payload
    if isinstance(payload, dict) and isinstance(payload.get("generation"), int):
        return int(payload["generation"])
    return 0
