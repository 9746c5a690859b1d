"""The webhook half of the simulation: each tenant's subscriptions pointing at
the local receiver, the events fed through SQS (with duplicates), and
afterwards the facts the invariants are judged on, read from the receiver and
the database.

Besides the ordinary events (--events, spread over every tenant's ordinary
subscriptions), a few scenario events (webhook_checks.py judges them):
- one per hostile Retry-After (a huge number, a negative one, a far-future
  date, garbage, a non-ASCII digit, a day), answered 429/503 once, then 2xx;
- a few whose first answer trickles a byte at a time, far past the attempt's
  deadline, then 2xx;
- a few misaddressed: the message names one tenant and another tenant's
  subscription, which must never receive it;
- a few to a subscription whose endpoint answers 410 Gone until the run
  enables the subscription again, once every one of them is held.

Every subscription is created through the API (onceonly_app.webhooks.subscriptions.add,
what `onceonly subscriptions add` runs), filtered to invoice.paid: the overdue job's
invoice.overdue events are fanned out to none of them (subscription_checks.py judges
it). Each tenant's first ordinary subscription is capped at LOW_CAP requests in
flight, so the replicas' attempts contend for its permits; the others keep the
default limits, so the run still measures delivery, not one endpoint's cap."""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg

from .loadgen import Message
from .recovery_load import FAILING_EVENTS, RECOVER_EVENTS, RecoveryScenario
from .report import DeliveryFacts
from .tenants import Tenant
from .webhook_checks import HOSTILE_RETRY_AFTER, TRICKLE_GAP

SUBSCRIPTIONS = 2  # ordinary ones per tenant
TRICKLE_EVENTS = 2
MISADDRESSED_EVENTS = 2
GONE_EVENTS = 4  # to the subscription a 410 disables: held until the run enables it again
DUPLICATE_RATE = 0.15  # share of events that are delivered twice
DUPLICATE_WINDOW = 40  # a duplicate lands within this many messages of the original

EVENT_FILTER = ["invoice.paid"]  # what every simulated subscription wants
LOW_CAP = 2  # requests in flight to each tenant's first ordinary subscription, across the replicas
DELIVERY_STATUSES = "SELECT id, status FROM webhook_deliveries WHERE webhook_id = ANY(%s)"
UNFINISHED_DELIVERIES = """
SELECT count(*) FILTER (WHERE status NOT IN ('succeeded', 'dead')), count(*),
       (SELECT count(*) FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
         WHERE d.webhook_id = ANY(%(ids)s))
  FROM webhook_deliveries WHERE webhook_id = ANY(%(ids)s)"""
# When the sender scheduled the next attempt of a retrying delivery, as a delay
# from its outcome (both stamped by the database in the outcome's statement).
RETRY_SCHEDULED = """
SELECT id, extract(epoch FROM next_attempt_at - updated_at)::float8 FROM webhook_deliveries
 WHERE id = ANY(%s) AND status = 'retrying'"""
# The disabled subscription's state, and how many of the given deliveries are held.
HELD_STATE = """
SELECT s.enabled,
       (SELECT count(*) FROM webhook_deliveries d WHERE d.id = ANY(%(ids)s) AND d.status = 'held') AS held
  FROM webhook_subscriptions s WHERE s.id = %(webhook_id)s"""
# Outcome writes the fence refused: a holder that outlived its claim.
FENCED_ATTEMPTS = """
SELECT count(*) FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
 WHERE d.webhook_id = ANY(%s) AND NOT a.recorded"""


@dataclass
class WebhookLoad:
    run_id: str
    rng: random.Random
    tenants: list[Tenant]
    subscription_ids: list[str] = field(default_factory=list)
    tenant_of: dict[str, str] = field(default_factory=dict)  # subscription (= endpoint name) -> its tenant
    caps: dict[str, int] = field(default_factory=dict)  # capped subscription -> its max in flight
    fed_to: dict[str, set[str]] = field(default_factory=dict)  # subscription -> the deliveries fed to it
    ordinary: list[str] = field(default_factory=list)  # the subscriptions ordinary events go to
    hostile: str = ""  # the subscription whose endpoint answers a hostile Retry-After
    trickling: str = ""  # the subscription whose endpoint trickles its first answers
    expected: set[str] = field(default_factory=set)  # delivery ids the events must produce
    generated: set[str] = field(default_factory=set)  # of those, the ones fed as generated events
    retry_after_of: dict[str, str] = field(default_factory=dict)  # hostile delivery id -> its Retry-After
    scheduled: dict[str, float] = field(default_factory=dict)  # hostile delivery id -> the longest delay seen
    trickled: set[str] = field(default_factory=set)  # delivery ids whose first answer trickles
    parked: set[str] = field(default_factory=set)  # delivery ids whose messages all sit in the dead-letter queue
    misaddressed: set[str] = field(default_factory=set)  # delivery ids that must be refused, never sent
    gone: str = ""  # the subscription whose endpoint answers 410 until it is enabled again
    revived: threading.Event = field(default_factory=threading.Event)  # set: that endpoint answers 2xx
    held: set[str] = field(default_factory=set)  # delivery ids of its events: held, then delivered
    disabled_at: float | None = None  # when the run first saw the 410's disable committed (this host's clock)
    recovery: RecoveryScenario | None = None  # recover and auto-disable, on a tenant of their own
    enabled_at: float | None = None  # when the run enabled it again
    message_delivery: dict[str, str] = field(default_factory=dict)  # SQS message id -> delivery id
    first_sent: dict[str, float] = field(default_factory=dict)
    events_in: int = 0  # distinct generated events (deliveries), duplicates not counted
    events_fed: int = 0  # of those, how many were sent at least once
    duplicate_messages: int = 0
    sqs_parked: int = 0  # messages in the dead-letter queue after the end-of-run redrive

    def seed(self, database_url: str, receiver: Any, latency: float, failure_rate: float) -> None:
        """Ordinary subscriptions for every tenant (slow and flaky as asked), and
        the hostile and trickling ones, scripted per delivery in messages()."""
        from ..testing.receiver import Behaviour

        with psycopg.connect(database_url, autocommit=True) as conn:
            for n, tenant in enumerate(self.tenants):
                names = [f"sim-{self.run_id}-{n}-{k}" for k in range(SUBSCRIPTIONS)]
                for k, name in enumerate(names):
                    self._subscribe(conn, receiver, name, tenant, Behaviour(
                        latency=latency, failure_rate=failure_rate, seed=self.rng.randrange(2**31)),
                        LOW_CAP if k == 0 else None)
                self.ordinary += names
            self.hostile, self.trickling = f"sim-{self.run_id}-hostile", f"sim-{self.run_id}-trickle"
            self._subscribe(conn, receiver, self.hostile, self.tenants[1 % len(self.tenants)], Behaviour())
            self._subscribe(conn, receiver, self.trickling, self.tenants[-1], Behaviour())
            self.gone = f"sim-{self.run_id}-gone"
            self._subscribe(conn, receiver, self.gone, self.tenants[0], Behaviour(gone_until=self.revived))
            self.recovery = RecoveryScenario(self.run_id)

            def subscribe(name: str, tenant: str, behaviour: Any, event_types: list[str] | None,
                          new_tenant: bool) -> None:
                self._subscribe(conn, receiver, name, Tenant(tenant, "UTC", "USD"), behaviour,
                                event_types=event_types, new_tenant=new_tenant)

            self.recovery.seed(conn, receiver, subscribe)
            self.expect({self.recovery.notice})

    def _subscribe(self, conn: psycopg.Connection[Any], receiver: Any, name: str, tenant: Tenant,
                   behaviour: Any, cap: int | None = None, *, event_types: list[str] | None = None,
                   new_tenant: bool = False) -> None:
        """Create the subscription through the API; its endpoint verifies with the
        secret add() returns."""
        from onceonly_app.webhooks import subscriptions
        from onceonly_app.webhooks.endpoint_limits import DEFAULT_MAX_IN_FLIGHT

        added = subscriptions.add(conn, tenant.id, f"{receiver.base_url}/{name}", event_types or EVENT_FILTER,
                                  actor="simulate", subscription_id=name, max_in_flight=cap or DEFAULT_MAX_IN_FLIGHT,
                                  allow_http_hosts={"127.0.0.1"},  # the receiver, as the replicas allow it
                                  new_tenant=new_tenant)
        receiver.endpoint(name, added.secret, behaviour)
        self.subscription_ids.append(name)
        self.tenant_of[name] = tenant.id
        if cap is not None:
            self.caps[name] = cap

    def subscriptions_by_tenant(self) -> dict[str, list[str]]:
        by_tenant: dict[str, list[str]] = {t.id: [] for t in self.tenants}
        for name in self.subscription_ids:
            if self.tenant_of[name] in by_tenant:  # not the scenarios' own tenant (recovery_load.py)
                by_tenant[self.tenant_of[name]].append(name)
        return by_tenant

    def track(self, webhook_id: str, event_id: str, message_id: str) -> str:
        from onceonly_app.webhooks.deliveries import delivery_id_for

        delivery_id = delivery_id_for(webhook_id, event_id)
        self.fed_to.setdefault(webhook_id, set()).add(delivery_id)
        if delivery_id not in self.expected:
            self.expected.add(delivery_id)
            self.generated.add(delivery_id)
            self.events_in += 1
        self.message_delivery[message_id] = delivery_id
        return delivery_id

    def _event(self, i: int, webhook_id: str, tenant: str) -> tuple[Message, str]:
        event_id = f"evt_{self.run_id}_{i:05d}"
        body = {"webhook_id": webhook_id, "tenant_id": tenant, "event_id": event_id,
                "event_type": "invoice.created",
                "payload": {"invoice": f"inv_{i}", "tenant_id": tenant, "amount_cents": 1000 + i}}
        message = Message(str(uuid.UUID(int=self.rng.getrandbits(128))), body)
        return message, self.track(webhook_id, event_id, message.message_id)

    def messages(self, count: int, receiver: Any) -> list[Message]:
        """``count`` ordinary events and the scenario events as SQS messages, with
        duplicates mixed in: the same message delivered twice (SQS
        at-least-once) or the event sent again."""
        from ..testing.receiver import Reply

        stream: list[Message] = []
        for i in range(count):
            webhook_id = self.ordinary[i % len(self.ordinary)]
            stream.append(self._event(i, webhook_id, self.tenant_of[webhook_id])[0])
        n = count
        for status, value, _ in HOSTILE_RETRY_AFTER:
            message, delivery_id = self._event(n, self.hostile, self.tenant_of[self.hostile])
            receiver.script(delivery_id, [Reply(status, retry_after=value)])  # then the default: 2xx
            self.retry_after_of[delivery_id] = value
            stream.append(message)
            n += 1
        for _ in range(TRICKLE_EVENTS):
            message, delivery_id = self._event(n, self.trickling, self.tenant_of[self.trickling])
            receiver.script(delivery_id, [Reply(200, trickle=TRICKLE_GAP)])
            self.trickled.add(delivery_id)
            stream.append(message)
            n += 1
        for _ in range(GONE_EVENTS):
            message, delivery_id = self._event(n, self.gone, self.tenant_of[self.gone])
            self.held.add(delivery_id)
            stream.append(message)
            n += 1
        if self.recovery is not None:
            for webhook_id, ids, count in ((self.recovery.aborting, self.recovery.aborted, RECOVER_EVENTS),
                                           (self.recovery.failing, self.recovery.failing_ids, FAILING_EVENTS)):
                for _ in range(count):
                    message, delivery_id = self._event(n, webhook_id, self.recovery.tenant)
                    ids.add(delivery_id)
                    stream.append(message)
                    n += 1
        for k in range(MISADDRESSED_EVENTS):
            # Another tenant's event, addressed to this subscription: hand-made, or from before tenants.
            webhook_id = self.ordinary[k % len(self.ordinary)]
            intruder = next(t.id for t in self.tenants if t.id != self.tenant_of[webhook_id])
            message, delivery_id = self._event(n, webhook_id, intruder)
            self.misaddressed.add(delivery_id)
            stream.append(message)
            n += 1
        self.rng.shuffle(stream)
        # Each message gets a place in the stream; a duplicate's place is up to
        # DUPLICATE_WINDOW places after its original's (sorting, not inserting: linear).
        placed = [(float(i), m) for i, m in enumerate(stream)]
        for i, original in enumerate(stream):
            if self.rng.random() >= DUPLICATE_RATE:
                continue
            same_message = self.rng.random() < 0.5
            message_id = original.message_id if same_message else str(uuid.UUID(int=self.rng.getrandbits(128)))
            self.message_delivery[message_id] = self.message_delivery[original.message_id]
            placed.append((i + self.rng.randint(0, DUPLICATE_WINDOW) + 0.5, Message(message_id, original.body)))
            self.duplicate_messages += 1
        placed.sort(key=lambda pair: pair[0])
        return [message for _, message in placed]

    @property
    def ordinary_ids(self) -> set[str]:
        """The deliveries of the --events events, the scenario ones left out."""
        return self.generated - set(self.retry_after_of) - self.trickled - self.misaddressed - self.held \
            - self._recovery_ids

    @property
    def scenario_events(self) -> int:
        return len(self.retry_after_of) + len(self.trickled) + len(self.misaddressed) + len(self.held) \
            + len(self._recovery_ids)

    @property
    def notices(self) -> set[str]:
        """Expected deliveries that are neither events nor relayed: the operational notices."""
        return {self.recovery.notice} if self.recovery else set()

    @property
    def _recovery_ids(self) -> set[str]:
        return self.recovery.aborted | self.recovery.failing_ids if self.recovery else set()

    def enable_when_held(self, conn: psycopg.Connection[Any], queue: Any) -> None:
        """Once the 410 disabled the subscription and every one of its events is
        held, enable it (``onceonly subscriptions enable``'s code) mid-run; its
        endpoint answers 2xx from then on."""
        from onceonly_app.webhooks.subscriptions import enable

        if self.recovery is not None:
            self.recovery.step(conn, queue)
        if self.enabled_at is not None:
            return
        row = conn.execute(HELD_STATE, {"ids": list(self.held), "webhook_id": self.gone}).fetchone()
        if row is None or row[0]:
            return
        if self.disabled_at is None:
            # Dated when read back, so at or after its commit. Its updated_at is the
            # disabling transaction's start: an attempt that read the subscription
            # between that and the commit saw it enabled and rightly sent.
            self.disabled_at = time.time()
        if row[1] < len(self.held):
            return
        self.revived.set()
        self.enabled_at = time.time()
        enable(conn, queue, self.gone)

    def expect(self, delivery_ids: set[str]) -> None:
        """Deliveries that events from elsewhere in the run (the payment watcher) must produce."""
        self.expected |= delivery_ids

    def relay(self, messages: list[Message]) -> list[Message]:
        """Messages another function sent to the webhook queue, on their way to the
        dispatcher: remember which delivery each is for (its latency starts when fed)."""
        from onceonly_app.webhooks.deliveries import delivery_id_for

        for message in messages:
            try:
                body = json.loads(message.body)
                delivery_id = delivery_id_for(body["webhook_id"], body["event_id"])
            except (ValueError, TypeError, KeyError):
                continue  # malformed: the dispatcher rejects it, the report counts it as an SQS dead letter
            if delivery_id in self.expected:  # not another run's subscription on a shared database
                self.message_delivery[message.message_id] = delivery_id
        return messages

    def deliveries_of(self, messages: list[Message]) -> set[str]:
        """The expected deliveries ``messages`` carry (malformed ones carry none)."""
        return {self.message_delivery[m.message_id] for m in messages if m.message_id in self.message_delivery}

    def on_feed(self, message_id: str, at: float) -> None:
        delivery_id = self.message_delivery.get(message_id)
        if delivery_id is not None and delivery_id not in self.first_sent:
            self.first_sent[delivery_id] = at
            if delivery_id in self.generated:
                self.events_fed += 1

    def unfinished(self, conn: psycopg.Connection[Any]) -> tuple[int, int, int]:
        """(deliveries not yet succeeded or dead, deliveries, attempts made so far)."""
        row = conn.execute(UNFINISHED_DELIVERIES, {"ids": self.subscription_ids}).fetchone()
        assert row is not None
        return int(row[0]), int(row[1]), int(row[2])

    def sample_retry_schedules(self, conn: psycopg.Connection[Any]) -> None:
        """Note the delay the sender scheduled for each hostile delivery waiting
        for its retry. Only the last one is kept in the database, so it is read
        while the delivery waits: the clamped ones wait the cap (seconds), far
        longer than one poll."""
        for delivery_id, delay in conn.execute(RETRY_SCHEDULED, (list(self.retry_after_of),)):
            self.scheduled[delivery_id] = max(float(delay), self.scheduled.get(delivery_id, 0.0))

    def park(self, dead_letter_queue: list[Message]) -> None:
        """Note the deliveries the messages left in the dead-letter queue carry,
        after the end-of-run redrive: waiting for an operator, not judged lost."""
        self.sqs_parked = len(dead_letter_queue)
        self.parked = self.deliveries_of(dead_letter_queue)

    def facts(self, conn: psycopg.Connection[Any], receiver: Any, messages_sent: int,
              redriven: list[Message]) -> DeliveryFacts:
        """``redriven``: the messages moved back from the dead-letter queue at
        the end of the run (see :meth:`park` for the ones still in it)."""
        statuses = {str(i): str(s) for i, s in conn.execute(DELIVERY_STATUSES, (self.subscription_ids,))}
        fenced_row = conn.execute(FENCED_ATTEMPTS, (self.subscription_ids,)).fetchone()
        seen = tally_receiver(receiver, set(self.subscription_ids))
        return DeliveryFacts(
            events_in=self.events_in, messages_sent=messages_sent, duplicate_messages=self.duplicate_messages,
            expected_ids=set(self.expected), statuses=statuses, accepted=seen.accepted, requests=seen.requests,
            cut_attempts=seen.cut_attempts, unverified=seen.unverified, first_sent=dict(self.first_sent),
            first_accepted=seen.first_accepted,
            fenced_refused=int(fenced_row[0]) if fenced_row else 0, sqs_redriven=len(redriven),
            sqs_parked=self.sqs_parked, parked_ids=set(self.parked),
            ordinary_ids=self.ordinary_ids)


@dataclass
class ReceiverTally:
    """What the receiver saw of the run's endpoints."""

    requests: int = 0  # received whole and handed to the endpoint
    unverified: int = 0  # of those, the ones whose signature did not verify
    cut_attempts: int = 0  # cut by their sender mid-body: never handed to the endpoint
    accepted: Counter[str] = field(default_factory=Counter)  # webhook-id -> 2xx answers read whole
    first_accepted: dict[str, float] = field(default_factory=dict)  # webhook-id -> first 2xx


def tally_receiver(receiver: Any, endpoints: set[str]) -> ReceiverTally:
    """Count the receiver's requests and cut attempts to ``endpoints`` (the run's
    subscriptions; a shared receiver may serve others)."""
    tally = ReceiverTally(cut_attempts=sum(1 for cut in receiver.cut_attempts if cut.endpoint in endpoints))
    for request in receiver.history():
        if request.endpoint not in endpoints:
            continue
        tally.requests += 1
        tally.unverified += 0 if request.verified else 1
        if request.webhook_id and request.accepted:
            tally.accepted[request.webhook_id] += 1
            at = request.answered_at or request.received_at
            tally.first_accepted[request.webhook_id] = min(tally.first_accepted.get(request.webhook_id, at), at)
    return tally
