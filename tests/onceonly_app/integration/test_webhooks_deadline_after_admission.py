"""An attempt's request deadline starts once its endpoint admitted it
(docs/webhooks.md, "Deadlines"), with the real handlers in process, the real
PostgreSQL and coordination store, and the local receiver on 127.0.0.1. The
admission is slowed from the test (the real gate admits, then the wrapper
waits before the request may start):

- a slow admission still leaves the request its whole deadline;
- an admission slowed past the holder's lease (the dispatcher's safety net, a
  retry claim's lease) sends nothing: the delivery is due again after a short
  delay, with no attempt used, and is delivered once admission is quick again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import onceonly
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.endpoint_limits import HELD_BACK_DELAY, Admission, EndpointGate
from onceonly_cli.testing.receiver import Behaviour, WebhookReceiver
from tests.support.delivery.webhooks import (
    attempts,
    context,
    deliveries,
    drive_retries,
    lambda_env,
    message,
    new_id,
    sleep_until_due,
    sqs_event,
    subscribe,
    webhook_env,
)
from tests.support.functions.events import scheduled_event

ATTEMPT_TIMEOUT = 1.2  # the request's whole deadline (WEBHOOK_ATTEMPT_TIMEOUT_SECONDS)


@pytest.fixture(params=["postgres", "redis"])
def store_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_url"))


class SlowAdmission:
    """Wraps EndpointGate.admit: after the real gate admits, waits ``delay``
    seconds (while holding what it admitted), recording when each admission ended."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, delay: float) -> None:
        self.delay = delay
        self.admitted_at: list[float] = []
        real_admit = EndpointGate.admit

        @contextmanager
        def slow_admit(gate: EndpointGate, *args: Any, **kwargs: Any) -> Iterator[Admission]:
            with real_admit(gate, *args, **kwargs) as admission:
                time.sleep(self.delay)
                self.admitted_at.append(time.time())
                yield admission

        monkeypatch.setattr(EndpointGate, "admit", slow_admit)


def test_a_slow_admission_leaves_the_request_its_whole_deadline(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Admission takes 0.8 s and the receiver answers after 0.7 s: 1.5 s in all,
    more than the 1.2 s deadline, but the request alone fits in it. A deadline
    started before admission would cut the request off after 0.4 s."""
    slow = SlowAdmission(monkeypatch, 0.8)
    webhook_id = subscribe(webhook_db, receiver, Behaviour(latency=0.7))
    event_id = new_id("evt")
    delivery_id = delivery_id_for(webhook_id, event_id)
    env = webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=new_id("webhook-retries"),
                      WEBHOOK_ATTEMPT_TIMEOUT_SECONDS=str(ATTEMPT_TIMEOUT))
    with lambda_env(env) as (dispatch, _):
        started = time.time()
        assert dispatch(sqs_event([message(webhook_id, event_id)]), context("dispatch")) == {"batchItemFailures": []}
    (admitted_at,) = slow.admitted_at
    assert admitted_at - started >= 0.8  # the admission really was slow
    row = deliveries(webhook_db, [delivery_id])[delivery_id]
    assert (row["status"], row["attempts"]) == ("succeeded", 1), row
    assert receiver.successes() == {delivery_id: 1}


def test_an_admission_slowed_past_the_lease_sends_nothing(
    webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lease (the dispatcher's safety net, then each claim's) is 2 s and
    admission takes 1.2 s: a request admitted then could run past the lease,
    when another worker would claim the delivery and POST it again. Neither the
    dispatcher nor the retry worker sends it; no attempt is used, and it is due again after
    the gate's short delay; once
    admission is quick again it is delivered exactly once."""
    slow = SlowAdmission(monkeypatch, 1.2)
    webhook_id = subscribe(webhook_db, receiver)
    event_id = new_id("evt")
    delivery_id = delivery_id_for(webhook_id, event_id)
    env = webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=new_id("webhook-retries"),
                      WEBHOOK_ATTEMPT_TIMEOUT_SECONDS=str(ATTEMPT_TIMEOUT), WEBHOOK_ATTEMPT_LEASE_SECONDS="2")
    with lambda_env(env) as (dispatch, retry):
        assert dispatch(sqs_event([message(webhook_id, event_id)]), context("dispatch")) == {"batchItemFailures": []}
        assert len(slow.admitted_at) == 1 and receiver.counts() == {}
        row = deliveries(webhook_db, [delivery_id])[delivery_id]
        assert (row["status"], row["attempts"], row["deferrals"]) == ("retrying", 0, 1), row
        # Due again after the gate's first short delay (counted from a moment just
        # after the admission the wrapper timed), not when the 2 s lease ends.
        assert row["next_attempt_at"].timestamp() <= slow.admitted_at[0] + HELD_BACK_DELAY[1] + 0.5

        sleep_until_due(webhook_db, delivery_id)
        summary = retry(scheduled_event("webhook_retry"), context("retry", 20))
        assert (summary["claimed"], summary["deferred"], summary["succeeded"]) == (1, 1, 0), summary
        assert len(slow.admitted_at) == 2 and receiver.counts() == {}
        row = deliveries(webhook_db, [delivery_id])[delivery_id]
        assert (row["status"], row["attempts"], row["deferrals"]) == ("retrying", 0, 2), row

        slow.delay = 0.0
        drive_retries(retry, lambda: bool(receiver.successes()))
    assert receiver.counts() == {delivery_id: 1}
    assert [(a["attempt"], a["outcome"]) for a in attempts(webhook_db, [delivery_id])] == [(1, "succeeded")]
