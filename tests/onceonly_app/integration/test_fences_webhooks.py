"""Webhook fences refuse a stale holder in every order, on
every coordination store (the retry claims' tokens come from its due queue).

Holder 1 is the dispatcher (token 0) or a retry worker (a queue claim). Its
claim is taken from it: the queue's ``put`` makes a held item due again, which
is what the lease running out does, without waiting for it. Holder 2 then
claims with a higher token, stamps the delivery and stops mid-POST in a thread.
Holder 1 now makes every write it still could (stamp, outcome, queue ack or
retry): each is refused, and holder 2's result stands when it is let go.

The orders where holder 2 had already finished are covered elsewhere
(tests/onceonly_app/concurrency/test_webhooks_crash_and_fencing.py); these are the ones
where only the token tells the two holders apart."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, cast

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import onceonly
from onceonly_app.runtime.budget import Budget
from onceonly_app.webhooks import subscriptions
from onceonly_app.webhooks.config import WebhookConfig
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.messages import DeliveryRequest
from onceonly_app.webhooks.redrive import redrive
from onceonly_app.webhooks.sender import SendResult, WebhookSender
from onceonly_app.webhooks.service import RetryReport, WebhookService
from onceonly_app.webhooks.signing import new_secret
from tests.support.delivery.webhooks import TENANT, attempts, create_subscription, deliveries, new_id
from tests.support.stores.interleave import Background, Interleaving, Seam

# Never dialled: ScriptedSender stands in for HTTP. Loopback is allowed so the
# SSRF guard passes it without a DNS lookup.
TARGET = "http://127.0.0.1:9/hook"
CONFIG = WebhookConfig(retry_schedule=(30.0, 30.0), connect_timeout=1.0, read_timeout=1.0, attempt_lease=60.0,
                       claim_batch=1, deadline_margin=1.0, allow_http_hosts=frozenset({"127.0.0.1"}))


plenty_of_time = Budget(lambda: 60.0, reserve=CONFIG.deadline_margin)  # an invocation with 60 s left


class ScriptedSender:
    """Stands in for the HTTP sender: answers ``status`` and records the
    webhook-id of every POST; ``during`` runs while the POST is in flight."""

    def __init__(self, status: int, during: Callable[[], None] | None = None) -> None:
        self.status = status
        self.during = during
        self.posts: list[str] = []

    def post(self, target: Any, body: str, headers: dict[str, str], deadline: Any = None) -> SendResult:
        self.posts.append(headers["webhook-id"])
        if self.during is not None:
            self.during()
        return SendResult(self.status, None if 200 <= self.status < 300 else f"HTTP {self.status}")


class QueueWithSeam:
    """A holder's due queue that runs ``after_claim`` once its claim is granted,
    before the holder stamps the delivery."""

    def __init__(self, queue: onceonly.Queue, after_claim: Callable[[], None]) -> None:
        self._queue = queue
        self._after_claim: Callable[[], None] | None = after_claim

    def claim(self, limit: int = 25, lease: float = 60.0) -> list[onceonly.Claim]:
        claims = self._queue.claim(limit=limit, lease=lease)
        if claims and self._after_claim is not None:
            hook, self._after_claim = self._after_claim, None
            hook()
        return claims

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


class Holders:
    """The delivery under test, and a service per holder with its own pool and
    store client, as separate Lambda containers have."""

    def __init__(self, db: str, store_url: str, store: onceonly.Store, queue_name: str) -> None:
        self.db = db
        self.store_url = store_url
        self.queue = store.queue(queue_name)
        self.config = replace(CONFIG, queue_name=queue_name)
        self.webhook_id = create_subscription(db, TARGET, new_secret())
        self.event_id = new_id("evt")
        self.delivery_id = delivery_id_for(self.webhook_id, self.event_id)
        self._closers: list[Callable[[], None]] = []

    def pool(self) -> ConnectionPool:
        pool = ConnectionPool(self.db, min_size=0, max_size=2, open=True)
        self._closers.append(pool.close)
        return pool

    def service(self, sender: ScriptedSender, *, after_claim: Callable[[], None] | None = None,
                config: WebhookConfig | None = None) -> WebhookService:
        store = onceonly.connect(self.store_url)
        self._closers.append(store.close)
        queue = store.queue(self.config.queue_name)
        if after_claim is not None:
            queue = cast(onceonly.Queue, QueueWithSeam(queue, after_claim))
        return WebhookService(self.pool(), queue, cast(WebhookSender, sender), config or self.config)

    def request(self) -> DeliveryRequest:
        return DeliveryRequest(self.webhook_id, self.event_id, "invoice.paid", {"invoice": self.event_id}, TENANT)

    def first_attempt_fails(self, config: WebhookConfig | None = None) -> None:
        """Dispatch; the first attempt gets a 500, so the delivery waits for a retry."""
        result = self.service(ScriptedSender(500), config=config).dispatch(self.request())
        assert result.attempt is not None and result.attempt.recorded and result.attempt.status == "retrying"

    def due_now(self) -> None:
        """Make the delivery's (generation 0) queue item due now. A claim on it is
        taken from its holder, which is what the claim's lease running out does."""
        self.queue.put(self.delivery_id, payload={"generation": 0})

    def row(self) -> dict[str, Any]:
        return deliveries(self.db, [self.delivery_id])[self.delivery_id]

    def log(self) -> list[tuple[int, int, str, bool]]:
        """The attempts log: (generation, fence_token, outcome, recorded) per POST."""
        return [(a["generation"], a["fence_token"], a["outcome"], a["recorded"])
                for a in attempts(self.db, [self.delivery_id])]

    def close(self) -> None:
        for close in self._closers:
            close()
        with psycopg.connect(self.db, autocommit=True) as conn:  # later tests' fan-outs skip it
            subscriptions.delete(conn, self.webhook_id)


@pytest.fixture
def holders(webhook_db: str, store_url: str, store: onceonly.Store, unique: str) -> Iterator[Holders]:
    h = Holders(webhook_db, store_url, store, f"{unique}-retries")
    yield h
    h.close()


def newer_worker_mid_post(holders: Holders, interleave: Interleaving) -> tuple[Seam, Background, ScriptedSender]:
    """Holder 2: a retry worker that will claim, stamp and stop mid-POST (then answer 200)."""
    mid_post = interleave.seam("holder 2 mid-POST")
    sender = ScriptedSender(200, during=mid_post)
    worker = holders.service(sender)
    return mid_post, interleave.background("holder-2", lambda: worker.run_retries(plenty_of_time)), sender


def test_the_dispatchers_outcome_is_refused_once_a_retry_claim_stamped(
        holders: Holders, interleave: Interleaving) -> None:
    mid_post, newer, newer_sender = newer_worker_mid_post(holders, interleave)

    def outlived_its_lease() -> None:  # while the dispatcher's POST is in flight
        holders.due_now()
        newer.start(until=mid_post)

    stale_sender = ScriptedSender(500, during=outlived_its_lease)
    dispatched = holders.service(stale_sender).dispatch(holders.request())
    assert dispatched.attempt is not None and not dispatched.attempt.recorded  # the outcome is refused
    assert holders.row()["status"] == "attempting"  # holder 2's stamp stands, its attempt is open

    mid_post.let_go()
    current: RetryReport = newer.result()
    assert (current.succeeded, current.leases_reclaimed) == (1, 1)
    row = holders.row()
    # attempts counts the attempts started: the refused one counts too
    assert (row["status"], row["attempts"], row["response_code"]) == ("succeeded", 2, 200)
    newer_token = row["fence_token"]
    assert newer_token >= 1
    assert holders.log() == [(0, 0, "failed", False), (0, newer_token, "succeeded", True)]
    assert stale_sender.posts == newer_sender.posts == [holders.delivery_id]
    assert holders.queue.depth().total == 0  # holder 2 acked; the dispatcher did not touch the item


def test_a_stale_retry_workers_outcome_is_refused_once_a_newer_claim_stamped(
        holders: Holders, interleave: Interleaving) -> None:
    holders.first_attempt_fails()
    holders.due_now()
    mid_post, newer, _ = newer_worker_mid_post(holders, interleave)

    def lease_runs_out_mid_post() -> None:
        holders.due_now()
        newer.start(until=mid_post)

    stale = holders.service(ScriptedSender(500, during=lease_runs_out_mid_post)).run_retries(plenty_of_time)
    assert (stale.fenced_writes_refused, stale.failed, stale.claims_contended) == (1, 0, 0)
    assert holders.row()["status"] == "attempting"

    mid_post.let_go()
    current: RetryReport = newer.result()
    assert current.succeeded == 1 and current.claims_contended == 0
    row = holders.row()
    # attempts counts the attempts started: the stale worker's refused one counts too
    assert (row["status"], row["attempts"], row["response_code"]) == ("succeeded", 3, 200)
    log = holders.log()
    stale_token, newer_token = log[1][1], log[2][1]
    assert log == [(0, 0, "failed", True), (0, stale_token, "failed", False), (0, newer_token, "succeeded", True)]
    assert newer_token > stale_token >= 1
    assert holders.queue.depth().total == 0  # acked by holder 2; holder 1 neither acked nor rescheduled it


def test_a_stale_claim_cannot_stamp_over_a_newer_one(holders: Holders, interleave: Interleaving) -> None:
    holders.first_attempt_fails()
    holders.due_now()
    mid_post, newer, _ = newer_worker_mid_post(holders, interleave)

    def paused_before_stamping() -> None:  # holder 1 holds its claim but has not stamped yet
        holders.due_now()
        newer.start(until=mid_post)

    stale_sender = ScriptedSender(500)
    stale = holders.service(stale_sender, after_claim=paused_before_stamping).run_retries(plenty_of_time)
    assert stale.fenced_writes_refused == 1 and stale_sender.posts == []  # refused before any POST

    mid_post.let_go()
    assert newer.result().succeeded == 1
    log = holders.log()
    assert [(outcome, recorded) for _, _, outcome, recorded in log] == [("failed", True), ("succeeded", True)]
    assert holders.row()["fence_token"] == log[1][1]
    assert holders.queue.depth().total == 0


def dead_then_redriven(holders: Holders, config: WebhookConfig) -> None:
    """Another worker claims the delivery from holder 1, fails its last attempt
    (dead, acked), and an operator re-drives it: generation 1, token 0."""
    holders.due_now()
    last = holders.service(ScriptedSender(500), config=config).run_retries(plenty_of_time)
    assert last.dead == 1
    with holders.pool().connection() as conn:
        (redriven,) = redrive(conn, holders.queue, delivery_ids=[holders.delivery_id])
    assert redriven.generation == 1


def test_a_claim_from_before_a_redrive_cannot_stamp(holders: Holders) -> None:
    two_attempts = replace(holders.config, retry_schedule=(30.0,))
    holders.first_attempt_fails(two_attempts)
    holders.due_now()

    stale = holders.service(ScriptedSender(500), config=two_attempts,
                            after_claim=lambda: dead_then_redriven(holders, two_attempts)).run_retries(plenty_of_time)
    assert stale.finished_elsewhere == 1  # its generation-0 claim: refused, nothing posted under it
    # Holder 1 then claimed generation 1's new item like any worker, legitimately.
    log = holders.log()
    assert [(g, outcome, recorded) for g, _, outcome, recorded in log] == [
        (0, "failed", True), (0, "failed", True), (1, "failed", True)]
    row = holders.row()
    assert (row["status"], row["generation"], row["attempts"]) == ("retrying", 1, 1)


def test_an_outcome_from_before_a_redrive_is_refused(holders: Holders, interleave: Interleaving) -> None:
    two_attempts = replace(holders.config, retry_schedule=(30.0,))
    holders.first_attempt_fails(two_attempts)
    holders.due_now()
    mid_post, newer, _ = newer_worker_mid_post(holders, interleave)

    def redriven_mid_post() -> None:  # holder 1 stamped generation 0 and is posting
        dead_then_redriven(holders, two_attempts)
        newer.start(until=mid_post)  # generation 1's first claim stamps (its token may equal holder 1's)

    stale = holders.service(ScriptedSender(500, during=redriven_mid_post),
                            config=two_attempts).run_retries(plenty_of_time)
    assert stale.fenced_writes_refused == 1 and stale.failed == 0
    assert (holders.row()["status"], holders.row()["generation"]) == ("attempting", 1)

    mid_post.let_go()
    assert newer.result().succeeded == 1
    row = holders.row()
    assert (row["status"], row["generation"], row["attempts"]) == ("succeeded", 1, 1)
    assert [(g, outcome, recorded) for g, _, outcome, recorded in holders.log()] == [
        (0, "failed", True), (0, "failed", True), (0, "failed", False), (1, "succeeded", True)]

