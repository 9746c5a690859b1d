"""The simulate judge "disabled subscription loses no event", run against races
built on a real PostgreSQL: an attempt that reads the subscription while the
disabling transaction is still open sees it enabled and rightly sends. Dated
by that transaction's own time (updated_at: its start), the old judge called
that a violation; dated by when the disable is seen committed, it is none,
while an attempt that starts after the commit and sends still is one. Each
judge keeps every failing case for the report."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

import onceonly
from onceonly_app.webhooks.config import WebhookConfig
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.messages import DeliveryRequest
from onceonly_app.webhooks.sender import WebhookSender
from onceonly_app.webhooks.service import WebhookService
from onceonly_cli.simulate.report import MAX_CASES, Invariant
from onceonly_cli.simulate.webhook_checks import attempted_while_disabled, judge_held
from onceonly_cli.testing.receiver import Behaviour, WebhookReceiver
from tests.support.delivery.subscription_fixtures import add_subscription
from tests.support.delivery.webhooks import new_id

ATTEMPTS = """
SELECT delivery_id, outcome, extract(epoch FROM started_at)::float8 AS started_at
  FROM webhook_attempts WHERE delivery_id = %s ORDER BY id"""


def _service(webhook_db: str, store: onceonly.Store) -> tuple[WebhookService, ConnectionPool]:
    pool = ConnectionPool(webhook_db, min_size=0, max_size=2, open=True)
    config = WebhookConfig(retry_schedule=(30.0,), allow_http_hosts=frozenset({"127.0.0.1"}), connect_timeout=2,
                           read_timeout=5, queue_name=new_id("q"))
    service = WebhookService(pool, store.queue(config.queue_name),
                             WebhookSender(config.connect_timeout, config.read_timeout), config,
                             logger=logging.getLogger("test"))
    return service, pool


def test_an_attempt_racing_the_disables_commit_is_no_violation_and_one_after_it_is(
        webhook_db: str, conn: psycopg.Connection, tenant: str, pg_store: onceonly.Store,
        receiver: WebhookReceiver) -> None:
    webhook_id, _ = add_subscription(conn, tenant, receiver, Behaviour(failure_rate=1.0))
    service, pool = _service(webhook_db, pg_store)
    event_id = new_id("evt")
    delivery_id = delivery_id_for(webhook_id, event_id)
    with psycopg.connect(webhook_db) as disabling:  # one transaction, open across the attempt
        disabling.execute("UPDATE webhook_subscriptions SET enabled = false, disabled_reason = 'race', "
                          "updated_at = now() WHERE id = %s", (webhook_id,))
        time.sleep(0.05)  # the attempt starts after the transaction's start, before its commit
        sent = threading.Event()
        worker = threading.Thread(target=lambda: (service.dispatch(DeliveryRequest(
            webhook_id, event_id, "invoice.paid", {"n": 1}, tenant)), sent.set()))
        worker.start()
        assert sent.wait(20)  # it read the subscription enabled: the disable is not committed yet
        worker.join()
        disabling.commit()
    seen = conn.execute("SELECT enabled, extract(epoch FROM updated_at)::float8 FROM webhook_subscriptions "
                        "WHERE id = %s", (webhook_id,)).fetchone()
    assert seen is not None and seen[0] is False
    committed_seen_at = time.time()  # read back: at or after the commit
    updated_at = float(seen[1])  # the disabling transaction's start
    pool.close()
    attempts: list[dict[str, Any]] = [dict(zip(("delivery_id", "outcome", "started_at"), row, strict=True))
                                      for row in conn.execute(ATTEMPTS, (delivery_id,))]
    assert [a["outcome"] for a in attempts] == ["failed"] and len(receiver.history(delivery_id)) == 1
    assert updated_at < attempts[0]["started_at"] < committed_seen_at  # the race really happened
    enabled_at = committed_seen_at + 60

    # Dated by updated_at, the request of an attempt that saw the subscription enabled is a violation: wrong.
    assert attempted_while_disabled(attempts, updated_at, enabled_at), "the old dating no longer errs?"
    assert attempted_while_disabled(attempts, committed_seen_at, enabled_at) == []
    verdict = judge_held(receiver.history(delivery_id), attempts, {delivery_id: "succeeded"}, {delivery_id},
                         committed_seen_at, enabled_at)
    assert not any("attempted while disabled" in case for case in verdict.cases), verdict.cases

    # An attempt that starts after the commit was seen and still sends is a violation, and is kept as a case.
    late = {"delivery_id": delivery_id, "outcome": "failed", "started_at": committed_seen_at + 0.01}
    verdict = judge_held(receiver.history(delivery_id), [*attempts, late], {delivery_id: "succeeded"},
                         {delivery_id}, committed_seen_at, enabled_at)
    assert not verdict.ok and any(f"{delivery_id}: attempted while disabled" in c for c in verdict.cases)


def test_a_failing_judge_keeps_its_cases_for_the_report() -> None:
    cases = [f"case {n}" for n in range(MAX_CASES + 50)]
    kept = asdict(Invariant("x", False, "; ".join(cases[:5]), cases=cases))
    assert kept["cases"] == cases[:MAX_CASES] and len(cases) == MAX_CASES + 50  # the judge's list is not cut
