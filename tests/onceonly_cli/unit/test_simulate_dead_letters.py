"""The simulated SQS is the template's: a message is parked in the dead-letter
queue after the template's maxReceiveCount, the end-of-run redrive moves it
back with a fresh receive count (as an operator's would), and the report
counts a message still parked apart from a lost delivery."""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import pytest

from onceonly_cli.local.template import TemplateError, source_queue
from onceonly_cli.simulate.loadgen import Driver, Message
from onceonly_cli.simulate.replicas import Invocation, InvocationResult
from onceonly_cli.simulate.report import DeliveryFacts, EffectCheck, build_report
from tests.support import REPO_ROOT

REPO = REPO_ROOT


class FailingPool:
    """Every invocation raises (a dispatcher that cannot process the batch)."""

    size = 1

    def submit(self, invocation: Invocation) -> None:
        invocation.on_done(InvocationResult(invocation, 0, ok=False, error="boom", finished=time.time()))


def test_the_dispatch_queue_settings_come_from_the_template() -> None:
    queue = source_queue(REPO / "template.yaml", "WebhookDispatchFunction")
    assert (queue.queue, queue.dead_letter_queue) == ("WebhookQueue", "WebhookDeadLetterQueue")
    text = (REPO / "template.yaml").read_text(encoding="utf-8")
    assert f"maxReceiveCount: {queue.max_receives}\n" in text
    assert f"VisibilityTimeout: {queue.visibility_timeout:g}\n" in text


def test_a_queue_without_a_dead_letter_queue_is_refused(tmp_path: Path) -> None:
    template = tmp_path / "template.yaml"
    template.write_text("Resources:\n  Q: {Type: AWS::SQS::Queue}\n  F:\n    Type: AWS::Serverless::Function\n"
                        "    Properties:\n      Events:\n        In: {Type: SQS, Properties: {Queue: !GetAtt Q.Arn}}\n",
                        encoding="utf-8")
    with pytest.raises(TemplateError, match="no RedrivePolicy"):
        source_queue(template, "F")


def _run_until_idle(driver: Driver) -> None:
    deadline = time.monotonic() + 30
    while not driver.idle:
        assert time.monotonic() < deadline, "the driver never went idle"
        driver.step(feed_cron=False, timeout=0.01)


def test_a_message_is_parked_after_max_receives_and_redriven_with_a_fresh_count() -> None:
    driver = Driver(FailingPool(), random.Random(1), "Dispatch", None, max_receives=3)  # type: ignore[arg-type]
    driver.enqueue([Message("m1", {"n": 1})])
    _run_until_idle(driver)
    assert [m.message_id for m in driver.dead_letter_queue] == ["m1"] and driver.messages_sent == 3
    (moved,) = driver.redrive_dead_letters()
    assert moved.receives == 0 and not driver.dead_letter_queue
    _run_until_idle(driver)  # it fails its 3 receives again and parks again
    assert driver.messages_sent == 6 and [m.message_id for m in driver.dead_letter_queue] == ["m1"]
    assert [m.message_id for m in driver.redriven] == ["m1"]


def _facts(statuses: dict[str, str], parked: set[str]) -> DeliveryFacts:
    return DeliveryFacts(
        events_in=2, messages_sent=2, duplicate_messages=0, expected_ids={"a", "b"}, statuses=statuses,
        accepted=Counter({i: 1 for i in statuses}), requests=len(statuses), cut_attempts=0, unverified=0,
        first_sent={}, first_accepted={}, fenced_refused=0, sqs_redriven=1, sqs_parked=len(parked),
        parked_ids=parked)


def _verdicts(facts: DeliveryFacts) -> dict[str, dict[str, object]]:
    now = time.time()
    report = build_report(config={}, started=now - 1, finished=now, replicas=1, deliveries=facts, ticks=[],
                          effects=[], invocations=[], kills=0, restarts=0, drained=True, drain_detail="")
    return {i["name"]: i for i in report["invariants"]} | {"webhooks": report["webhooks"]}


def test_a_delivery_whose_message_is_parked_is_reported_parked_not_lost() -> None:
    verdicts = _verdicts(_facts({"a": "succeeded"}, parked={"b"}))
    assert verdicts["no lost deliveries"]["ok"] and verdicts["one delivery per event"]["ok"]
    assert "1 parked in the dead-letter queue" in str(verdicts["one delivery per event"]["detail"])
    lost = str(verdicts["no lost deliveries"]["detail"])
    assert "1 messages redriven at the end of the run, 1 parked after it" in lost
    assert verdicts["webhooks"]["parked_ids"] == ["b"]  # type: ignore[index]


def test_a_delivery_missing_without_a_parked_message_is_lost() -> None:
    verdicts = _verdicts(_facts({"a": "succeeded"}, parked=set()))
    assert not verdicts["no lost deliveries"]["ok"] and not verdicts["one delivery per event"]["ok"]
    # The report keeps which one: the failing cases, not only a count.
    assert verdicts["no lost deliveries"]["cases"] == ["b: never created"]
    assert verdicts["one delivery per event"]["cases"] == ["b: missing"]


def test_a_parked_invoice_paid_delivery_is_not_missing() -> None:
    now = time.time()
    payments = [EffectCheck("payment-watcher", "payments", 1, 1)]
    for parked, ok in (({"b"}, True), (set(), False)):
        report = build_report(config={}, started=now - 1, finished=now, replicas=1,
                              deliveries=_facts({"a": "succeeded"}, parked), ticks=[], effects=[], invocations=[],
                              kills=0, restarts=0, drained=True, drain_detail="", payments=payments, paid_ids={"b"})
        (paid,) = [i for i in report["invariants"] if i["name"] == "invoice.paid: one delivery per subscription"]
        assert paid["ok"] is ok, paid


def test_an_invoice_paid_delivery_received_and_then_dead_is_counted_once() -> None:
    """Its last attempt's sender was killed after the receiver's 2xx: dead, yet
    received. The summary's received and dead-lettered parts still add up."""
    now = time.time()
    payments = [EffectCheck("payment-watcher", "payments", 1, 1)]
    facts = _facts({"a": "dead", "b": "dead"}, set())
    facts.accepted = Counter({"a": 1})
    report = build_report(config={}, started=now - 1, finished=now, replicas=1, deliveries=facts, ticks=[],
                          effects=[], invocations=[], kills=1, restarts=1, drained=True, drain_detail="",
                          payments=payments, paid_ids={"a", "b"})
    paid = report["payments"]
    assert (paid["invoice_paid_received"], paid["invoice_paid_dead"], paid["invoice_paid_deliveries"]) == (1, 1, 2)
    assert paid["invoice_paid_ok"] is True
