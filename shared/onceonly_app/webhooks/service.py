"""Dispatch and retry orchestration: who may attempt a delivery, and what its
outcome does to the delivery record and the due queue.

- Dispatch (SQS): the invocation whose INSERT created the delivery makes the
  first attempt with fencing token 0, after putting a safety net in the due
  queue (due when its attempt lease runs out), so a crash never loses it.
- Retry (schedule): any number of workers claim due deliveries from the queue;
  each claim stamps its token on the delivery before attempting, and every write
  recording an outcome must still match that token.
- Every attempt is counted when it starts (start_attempt), so a delivery whose
  attempts crash the worker still runs out of attempts and dead-letters; one
  claim that fails does not stop the run, only an unavailable store does.
- Every attempt has one deadline (attempt_budget) for its DNS lookup and its
  whole request, and is only started when the invocation has that much time left.
- The claims of one batch are attempted concurrently (max_in_flight at once,
  lanes.py), each with its own fence, outcome and report.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any

from onceonly import Claim, Queue, QueueDepth
from onceonly.errors import StoreUnavailableError
from onceonly_app.budget import Budget

from .backoff import RetryPolicy, parse_retry_after
from .config import WebhookConfig
from .deliveries import AttemptInput, DeliveryRepository, Outcome, Recorded, Subscription, delivery_id_for
from .endpoint_health import EndpointHealth
from .endpoint_limits import DEFER_RETENTION, Admission, EndpointGate
from .endpoint_settings import request_headers
from .lanes import run_in_lanes
from .messages import DeliveryRequest, MalformedMessageError
from .sender import SendResult, WebhookSender
from .signing import signed_headers
from .ssrf import Resolver, Target, UnresolvableHostError, UnsafeTargetError, check_target
from .urls import UnencodableURLError

# Statuses a queue item has nothing left to do for: finished, or held (enabling
# the subscription queues the delivery again, subscriptions.enable).
OFF_QUEUE = frozenset({"succeeded", "dead", "held", "expired", "dropped", "aborted"})
DISPATCH_TOKEN = 0  # queue items start at token 0; a claim's token is always >= 1
GONE_REASON = "410 Gone from the endpoint"  # the subscription's disabled_reason
HELD_ERROR = "subscription disabled: held until it is enabled"
ABORTED = "aborted by the receiver (webhook-delivery: abort-message): not retried"
HELD_BACK = "held back by the endpoint's limit (in flight or per second): delayed, no attempt used"
LANE_SPACING = 0.001  # seconds between the due times of a lane's records held back behind one another


class UnknownWebhookError(MalformedMessageError):
    """The message names a subscription that does not exist."""


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
    def __init__(self, repo: DeliveryRepository, queue: Queue, sender: WebhookSender, config: WebhookConfig,
                 *, logger: logging.Logger | Any | None = None, clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None, resolver: Resolver | None = None,
                 gate: EndpointGate | None = None, health: EndpointHealth | None = None) -> None:
        self.repo = repo
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
        """A Lambda invocation's time, WEBHOOK_DEADLINE_MARGIN kept back for recording and acking."""
        return Budget.of_lambda(context, reserve=self.config.deadline_margin)

    def has_time_for_attempt(self, budget: Budget) -> bool:
        """Whether an attempt started now ends (deadline) with the margin still left."""
        return budget.allows(self.config.attempt_budget)

    def dispatch(self, request: DeliveryRequest, budget: Budget | None = None, *,
                 behind: float | None = None) -> DispatchResult:
        """Create the delivery of ``request`` and make its first attempt, once.
        ``behind``: an earlier record of its lane was held back by the endpoint's
        limit, due then; this one makes no attempt and is held back right
        behind it (_hold_behind), so it cannot overtake it.
        Raises UnknownWebhookError (the record fails alone and goes to the DLQ),
        DeadlineNearError before doing anything if ``budget`` leaves too
        little time, StoreUnavailableError if a store cannot be reached."""
        if budget is not None and not self.has_time_for_attempt(budget):
            raise DeadlineNearError(f"{budget.left():.1f} s left after the margin, an attempt needs up to "
                                    f"{self.config.attempt_budget:g} s")
        if self.repo.subscription(request.webhook_id) is None:
            raise UnknownWebhookError(f"unknown webhook_id {request.webhook_id!r}")
        delivery_id = self.repo.create(request)
        if delivery_id is None:
            return self._duplicate(delivery_id_for(request.webhook_id, request.event_id))
        # The safety net first: if this invocation dies from here on, a retry
        # worker claims the delivery when the lease runs out.
        safety_net_due = self.clock() + self.config.attempt_lease
        self.queue.put(delivery_id, due_at=safety_net_due, payload={"generation": 0})
        if behind is not None:
            return self._hold_behind(delivery_id, request.webhook_id, behind)
        report = self._attempt(delivery_id, generation=0, token=DISPATCH_TOKEN)
        if report is None:
            return DispatchResult(delivery_id, "fenced")  # a retry worker owns it (and the queue item)
        if report.recorded:
            if report.status == "retrying":
                self.queue.put(delivery_id, due_at=report.next_attempt_at, payload={"generation": 0})
            else:
                self.queue.cancel(delivery_id)
                if report.status == "held":
                    self._requeue_released([delivery_id])
        # Not recorded: a retry worker reclaimed it (we outlived our lease); the
        # queue item is that worker's now, so leave it alone.
        return DispatchResult(delivery_id, "attempted", report)

    def _hold_behind(self, delivery_id: str, webhook_id: str, behind: float) -> DispatchResult:
        """Hold a new delivery back, without an attempt, due LANE_SPACING after
        ``behind``: once a lane's record is held back, the rest of the lane
        waits behind it, in batch order (a retry worker claims the earliest due
        first). Fenced like the first attempt (token 0, untouched)."""
        due = max(behind, self.clock()) + LANE_SPACING
        if not self.repo.hold_behind(delivery_id, due):
            return DispatchResult(delivery_id, "fenced")  # a retry worker took it meanwhile
        self.queue.put(delivery_id, due_at=due, payload={"generation": 0})
        report = AttemptReport(delivery_id, webhook_id, "deferred", "retrying", True, 0, None, due)
        self.log.info("held back behind an earlier record of its lane",
                      extra={"delivery_id": delivery_id, "webhook_id": webhook_id, "next_attempt_at": due})
        return DispatchResult(delivery_id, "attempted", report)

    def _duplicate(self, delivery_id: str) -> DispatchResult:
        created_at = self.repo.untouched_since(delivery_id)
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
        """Process one claimed batch, max_in_flight claims at once, each counted in
        its own report (merged into ``report``). Once a store is unavailable, the
        claims not started yet are left to their leases; returns that outage."""
        outage: list[StoreUnavailableError] = []

        def process(claim: Claim) -> RetryReport:
            own = RetryReport()
            if not outage:
                try:
                    self._process_claim(claim, budget, own, to_ack, released)
                except StoreUnavailableError as exc:
                    outage.append(exc)
            return own

        # Every claim is its own lane: retries keep no order (docs/webhooks.md).
        for done in run_in_lanes(claims, lambda claim: claim.item_id, process, self.config.max_in_flight):
            report.add(done.result())
        return outage[0] if outage else None

    def _process_claim(self, claim: Claim, budget: Budget, report: RetryReport,
                       to_ack: list[Claim], released: list[str]) -> None:
        """One claim, isolated: a failure that belongs to this claim alone is logged
        and counted, and the run goes on; its lease runs out and it is claimed
        again (the attempt, if it started, was counted). A store that cannot be
        reached (StoreUnavailableError) ends the run: the next claims would fail too."""
        if not self.has_time_for_attempt(budget) or \
                claim.lease_expires_at - self.clock() <= self.config.attempt_budget:
            # Too late to finish inside the deadline or the lease: hand it
            # back now instead of leaving it locked until the lease ends.
            if self.queue.retry(claim, due_at=self.clock()):
                report.handed_back += 1
            else:
                report.claims_contended += 1
            return
        try:
            retry_at = self._handle_claim(claim, report, to_ack, released)
            if retry_at is not None and not self.queue.retry(claim, due_at=retry_at):
                report.claims_contended += 1
        except StoreUnavailableError:
            raise
        except Exception:  # noqa: BLE001 - one bad claim must not cost the others
            report.claims_failed += 1
            self.log.exception("claim failed; it is retried when its lease ends",
                               extra={"delivery_id": claim.item_id, "token": claim.token})

    def _handle_claim(self, claim: Claim, report: RetryReport, to_ack: list[Claim],
                      released: list[str]) -> float | None:
        """Attempt one claimed delivery; returns the next due time, or None (acked
        or skipped). ``released`` gets the deliveries whose ack may remove the
        queue item an enable meant for their release (see _requeue_released)."""
        generation = _generation_of(claim)
        context = {"delivery_id": claim.item_id, "token": claim.token, "generation": generation}
        previous = self.repo.stamp_fence(claim.item_id, generation, claim.token)
        if previous is None:
            state = self.repo.state(claim.item_id)
            if state is None or state["generation"] > generation or state["status"] in OFF_QUEUE:
                report.finished_elsewhere += 1
                to_ack.append(claim)  # nothing left to do for this queue item
                if state is not None and state["generation"] > generation:
                    released.append(claim.item_id)
            else:
                report.fenced_writes_refused += 1
                self.log.warning("claim fenced off: a newer holder stamped the delivery",
                                 extra={**context, "fence_token": state["fence_token"]})
            return None
        if previous in ("pending", "attempting"):
            report.leases_reclaimed += 1
            self.log.info("lease reclaimed: the previous holder never recorded an outcome", extra=context)
        attempt = self._attempt(claim.item_id, generation, claim.token)
        if attempt is None:
            report.fenced_writes_refused += 1  # a newer holder stamped between our stamp and our start
            return None
        report.count(attempt)
        if not attempt.recorded:
            return None
        if attempt.status == "retrying":
            return attempt.next_attempt_at
        to_ack.append(claim)
        if attempt.status == "held":
            released.append(claim.item_id)
        return None

    def _requeue_released(self, delivery_ids: list[str]) -> None:
        """After removing the queue items of ``delivery_ids``: queue those an
        enable released meanwhile. Its put_if_absent found the item this worker
        was about to remove (a hold recorded, or an older generation's item) and
        left it; once it is removed the release would have no queue item. Put
        if absent too: an item the enable (or anyone) put since is left alone."""
        rows = self.repo.retrying(delivery_ids)
        if rows:
            now = self.clock()
            self.queue.put_if_absent([(delivery_id, now, {"generation": generation})
                                      for delivery_id, generation in rows])

    # -- one attempt ------------------------------------------------------------
    def _attempt(self, delivery_id: str, generation: int, token: int) -> AttemptReport | None:
        """Start (count), make and record one attempt. None: fenced off before it
        started, nothing was sent. A delivery that has started every attempt its
        schedule allows is recorded dead here, without a request."""
        started = self.clock()
        delivery = self.repo.start_attempt(delivery_id, generation, token, self.policy.max_attempts)
        gone_url = None
        if delivery is None:
            state = self.repo.state(delivery_id)
            if state is None or not self._out_of_attempts(state, generation, token):
                return None
            webhook_id = str(state["webhook_id"])
            outcome = Outcome("failed", "dead", None, (
                f"no outcome was recorded for the last of {self.policy.max_attempts} attempts (the worker "
                "died, timed out or could not read the response); not retried"), None)
        else:
            webhook_id = delivery.webhook_id
            outcome = self._try(delivery)
            gone_url = delivery.subscription.url if outcome.outcome == "gone" else None
        if outcome.outcome == "deferred":
            recorded = self.repo.defer(delivery_id, generation, token, outcome.next_attempt_at or self.clock(),
                                       DEFER_RETENTION)
        elif outcome.status == "held":
            # Decided again under the subscription's lock: a 410 only disables the
            # URL that answered it, and an enable meanwhile means retry now.
            recorded = self.repo.record_held(delivery_id, generation, token, webhook_id, outcome, started,
                                             gone_url, GONE_REASON)
        else:
            recorded = self.repo.record(delivery_id, generation, token, outcome, started)
        auto_disabled = False
        if recorded.recorded and delivery is not None:
            auto_disabled = self._note_health(delivery, generation, outcome, recorded)
        report = AttemptReport(
            delivery_id, webhook_id, outcome.outcome, recorded.status, recorded.recorded,
            recorded.attempt, outcome.response_code, recorded.next_attempt_at, auto_disabled)
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
        """start_attempt refused: is it because every allowed attempt has started
        (and this holder still owns the delivery), rather than a newer holder?"""
        return (state["generation"] == generation and state["fence_token"] == token
                and state["status"] in ("pending", "attempting")
                and state["attempts"] >= self.policy.max_attempts)

    def _try(self, delivery: AttemptInput) -> Outcome:
        """Make the request (or decide not to) and say what it means."""
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
        deadline = Budget.after(self.config.attempt_budget)  # one for the DNS lookup and the whole request
        try:
            target = check_target(subscription.url, self.config.allow_http_hosts, self.resolver, deadline)
        except UnsafeTargetError as exc:
            return Outcome("refused", "dead", None, f"refused by the SSRF guard: {exc}", None)
        except UnresolvableHostError as exc:
            return self._failure(SendResult(None, str(exc)), delivery.attempt)
        except UnencodableURLError as exc:
            # A URL stored before add/update encoded URLs: a failed attempt with its reason.
            return self._failure(SendResult(None, f"URL cannot be sent: {exc}"), delivery.attempt)
        with self._admitted(subscription) as admission:
            if admission:
                result = self._send(delivery, target, deadline)
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
    def _admitted(self, subscription: Subscription) -> Iterator[Admission]:
        """Whether the endpoint's limits let this request go now (holding its
        in-flight slot while it runs); always, without a gate."""
        if self.gate is None:
            yield Admission(True)
            return
        with self.gate.admit(subscription.id, subscription.max_in_flight, subscription.rate_per_second) as ok:
            yield ok

    def _failure(self, result: SendResult, attempts_made: int) -> Outcome:
        retry_after = parse_retry_after(result.retry_after, self.clock(), self.config.max_retry_after)
        delay = self.policy.next_delay(attempts_made, retry_after)
        if delay is None:
            return Outcome("failed", "dead", result.status_code,
                           f"{result.error} (last of {self.policy.max_attempts} attempts)", None)
        return Outcome("failed", "retrying", result.status_code, result.error, self.clock() + delay)


COUNTED = tuple(f.name for f in fields(RetryReport) if f.type == "int")


def _generation_of(claim: Claim) -> int:
    payload = claim.payload
    if isinstance(payload, dict) and isinstance(payload.get("generation"), int):
        return int(payload["generation"])
    return 0
