"""Hostile events into every handler, through its real Powertools entry point
(functions/*/app.py with a Lambda context), on a real PostgreSQL.

- SQS (webhook dispatch): every bad record fails alone, listed in
  batchItemFailures with a MalformedMessageError (never a driver error, never a
  crashed batch, never a store-outage backoff), and every good record of the
  same batch is delivered, signed, with its payload intact. An event that is not
  an SQS batch at all is refused with MalformedBatchError before any record runs.
- Schedules (webhook retry and the four cron-guarded jobs): a non-scheduled
  event is refused with InvalidEventError and takes no tick; every valid tick
  mixed among them runs once (duplicates, also with a repeated event id, skip).
- The schema custom resource: a request without its answer fields is refused
  with InvalidRequestError; one with an unknown RequestType is answered FAILED.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import onceonly
from onceonly.scheduled import InvalidEventError, tick_lock_name
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.dispatch_batch import MalformedBatchError
from onceonly_app.webhooks.messages import MalformedMessageError
from onceonly_cli.local.lambda_runtime import LambdaContext, load_handler
from onceonly_cli.testing.fake_payments import FakePayments
from onceonly_cli.testing.receiver import WebhookReceiver
from tests.support import REPO_ROOT
from tests.support.delivery.hostile_events import (
    BAD_PAYLOAD_MARKER,
    MAX_EXAMPLES,
    WRONG_TYPES,
    bad_message_bodies,
    bad_payloads,
    bad_scheduled_events,
    good_event_ids,
    good_payloads,
    sqs_record,
)
from tests.support.delivery.webhooks import TENANT, deliveries, message, subscribe, webhook_env
from tests.support.deploy.built_schema_function import source_custom_resource
from tests.support.deploy.cfn_response import ResponseUrl
from tests.support.functions.events import scheduled_event
from tests.support.jobs.jobs_helpers import payments_env

InvalidRequestError = source_custom_resource().InvalidRequestError

HOSTILE = settings(max_examples=MAX_EXAMPLES, deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                          HealthCheck.data_too_large])
SCHEDULED = {"overdue_invoices": "overdue", "recurring_billing": "recurring", "notifications": "notifications",
             "payment_watcher": "payment_watcher"}


def context(name: str) -> LambdaContext:
    return LambdaContext(function_name=name, timeout_seconds=60)


def load(function: str) -> Any:
    return load_handler(REPO_ROOT / "functions" / function, "app.handler")


@pytest.fixture
def fresh_clients() -> Iterator[None]:
    """Per-container clients built from this test's environment, and forgotten after."""
    from onceonly_app.webhooks import runtime

    runtime.reset()
    yield
    runtime.reset()


@pytest.fixture
def webhook_handlers(webhook_db: str, postgres_url: str, monkeypatch: pytest.MonkeyPatch,
                     fresh_clients: None) -> tuple[Any, Any]:
    for key, value in webhook_env(webhook_db, postgres_url, POWERTOOLS_LOG_LEVEL="DEBUG").items():
        monkeypatch.setenv(key, value)
    onceonly.connect(postgres_url).setup()
    return load("webhook_dispatch"), load("webhook_retry")


@contextmanager
def dispatcher_log() -> Iterator[list[str]]:
    """Every line the dispatcher's Powertools logger writes, formatted as it prints them."""
    logger = logging.getLogger("webhook-dispatch")
    formatter = logger.handlers[0].formatter
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(formatter.format(record) if formatter else record.getMessage())

    collect = Collect()
    # The module may have been imported by an earlier test at another level.
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(collect)
    try:
        yield lines
    finally:
        logger.removeHandler(collect)
        logger.setLevel(level)


def dispatch_processor() -> Any:
    """The dispatch module's BatchProcessor: its ``exceptions`` say why each record failed."""
    return sys.modules["_lambda_webhook_dispatch_app"].processor


# -- SQS: the dispatcher --------------------------------------------------------------------------------


@st.composite
def mixed_batches(draw: st.DrawFn, webhook_id: str) -> tuple[list[dict[str, Any]], dict[str, Any], set[str]]:
    """(records, good payload per event id, message ids of bad records). Some
    records share a message id (SQS never does that within a batch; a hostile
    caller may)."""
    size = draw(st.integers(1, 8))
    records: list[dict[str, Any]] = []
    good: dict[str, Any] = {}
    example = uuid.uuid4().hex[:8]  # fresh event ids per example: deliveries of earlier ones exist
    for n in range(size):
        if draw(st.booleans()):
            event_id = f"{example}-{n}-{draw(good_event_ids())}"
            payload = {**draw(good_payloads()), "marker": f"good-{example}-{n}"}
            records.append(sqs_record(message(webhook_id, event_id, payload=payload)))
            good[event_id] = payload
        else:
            bad_event = f"{example}-{n}-bad"
            body = draw(st.one_of(bad_message_bodies(webhook_id, TENANT), bad_payloads().map(
                functools.partial(message, webhook_id, bad_event, "invoice.paid"))))
            records.append(sqs_record(body))
    for n in range(len(records)):
        if len(records) > 1 and draw(st.integers(0, 5)) == 0:
            other = draw(st.integers(0, len(records) - 1))
            records[n]["messageId"] = records[other]["messageId"]
    bad_ids = {r["messageId"] for r in records if not _is_good(r, good)}
    return records, good, bad_ids


def _is_good(record: dict[str, Any], good: dict[str, Any]) -> bool:
    try:
        return json.loads(record["body"])["event_id"] in good
    except (TypeError, ValueError, KeyError, RecursionError):
        return False


def test_bad_sqs_records_fail_alone_and_good_ones_beside_them_are_delivered(
        webhook_handlers: tuple[Any, Any], webhook_db: str, receiver: WebhookReceiver) -> None:
    dispatch, _ = webhook_handlers
    webhook_id = subscribe(webhook_db, receiver)

    @HOSTILE
    @given(mixed_batches(webhook_id))
    def check(batch: tuple[list[dict[str, Any]], dict[str, Any], set[str]]) -> None:
        records, good, bad_ids = batch
        response = dispatch({"Records": records}, context("dispatch"))
        failed = [f["itemIdentifier"] for f in response["batchItemFailures"]]
        # every bad record is reported, and only the ids of bad records are
        assert set(failed) == bad_ids, (failed, bad_ids)
        reasons = [exc for _, exc, _ in dispatch_processor().exceptions]
        assert all(isinstance(exc, MalformedMessageError) for exc in reasons), reasons
        expected = {delivery_id_for(webhook_id, e): p for e, p in good.items()}
        rows = deliveries(webhook_db, sorted(expected))
        assert {d: rows[d]["status"] for d in expected} == dict.fromkeys(expected, "succeeded")
        for delivery_id, payload in expected.items():
            (received,) = [r for r in receiver.history(delivery_id) if r.status == 200]
            assert received.verified and json.loads(received.body)["data"] == payload

    with dispatcher_log() as lines:
        check()
    # The reasons name fields, never contents: no payload, good or bad, and no secret in any line.
    assert any('"malformed record rejected"' in line for line in lines)
    assert any('"attempt recorded"' in line for line in lines)
    leaked = [line[:200] for line in lines if BAD_PAYLOAD_MARKER in line or '"marker"' in line or "whsec_" in line]
    assert leaked == []


@pytest.mark.parametrize("event", [
    {"version": "0", "source": "aws.events", "detail-type": "Scheduled Event", "time": "2026-11-29T02:00:00Z"},
    {"Records": "x"}, {"Records": []}, {"Records": [1, 2]}, None, [], "Records",
    {"Records": [{"body": "{}"}]}, {"Records": [sqs_record("{}"), {**sqs_record("{}"), "messageId": 5}]},
])
def test_an_event_that_is_not_an_sqs_batch_is_refused_before_any_record(
        webhook_handlers: tuple[Any, Any], webhook_db: str, receiver: WebhookReceiver, event: Any) -> None:
    dispatch, _ = webhook_handlers
    if isinstance(event, dict) and isinstance(event.get("Records"), list) and event["Records"]:
        # A good record inside the malformed batch: not processed, so the whole
        # batch (it among them) is what SQS would bring back.
        webhook_id = subscribe(webhook_db, receiver)
        good = sqs_record(message(webhook_id, "evt-in-a-bad-batch"))
        event = {"Records": [good, *event["Records"]]}
    with pytest.raises(MalformedBatchError, match="SQS"):
        dispatch(event, context("dispatch"))
    assert receiver.history() == []


# -- schedules: the retry worker and the cron-guarded jobs ---------------------------------------------------


@pytest.fixture
def scheduled_handlers(jobs_db: str, postgres_url: str, moto_endpoint: str, ses_sender: str, sqs_queue: str,
                       fake_payments: FakePayments, unique: str, monkeypatch: pytest.MonkeyPatch,
                       fresh_clients: None) -> tuple[dict[str, Any], dict[str, str]]:
    """The four jobs' real handlers, loaded in this process on a tenant with no
    data and under a job name of this test's own: both are settings the
    handlers read at cold start (BILLING_TENANT, BILLING_JOB_NAME)."""
    env = {"BILLING_TENANT": f"tenant-{unique}", "BILLING_JOB_NAME": f"job-{unique}",
           "DATABASE_URL": jobs_db, "ONCEONLY_STORE_URL": postgres_url, "SES_FROM_ADDRESS": ses_sender,
           "AWS_ENDPOINT_URL_SES": moto_endpoint, "AWS_ENDPOINT_URL_SQS": moto_endpoint,
           "POWERTOOLS_LOG_LEVEL": "WARNING", "POWERTOOLS_METRICS_NAMESPACE": "onceonly-test",
           **payments_env(fake_payments, sqs_queue)}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    onceonly.connect(postgres_url).setup()
    handlers = {function: load(function) for function in SCHEDULED}
    return handlers, {function: sys.modules[f"_lambda_{function}_app"].SETTINGS.job for function in SCHEDULED}


@pytest.mark.parametrize("function", sorted(SCHEDULED))
def test_scheduled_jobs_refuse_hostile_events_and_still_run_each_valid_tick_once(
        scheduled_handlers: tuple[dict[str, Any], dict[str, str]], postgres_url: str, function: str) -> None:
    handlers, jobs = scheduled_handlers
    handler = handlers[function]
    store = onceonly.connect(postgres_url)
    ticks = [f"2031-0{m}-01T00:00:00Z" for m in range(1, 4)]
    seen: set[str] = set()

    @settings(HOSTILE, max_examples=30)
    @given(st.lists(st.one_of(st.tuples(st.just("bad"), st.none()), st.tuples(st.just("good"), st.sampled_from(ticks))),
                    min_size=1, max_size=4), st.data())
    def check(plan: list[tuple[str, str | None]], data: st.DataObject) -> None:
        repeated_id = str(uuid.uuid4())  # one event id on several ticks: the tick is its time, not its id
        for kind, when in plan:
            if kind == "bad":
                event = data.draw(bad_scheduled_events(function))
                with pytest.raises(InvalidEventError):
                    handler(event, context(function))
                continue
            assert when is not None
            outcome = handler({**scheduled_event(function, when), "id": repeated_id}, context(function))
            assert outcome["status"] == ("skipped" if when in seen else "ran"), outcome
            seen.add(when)

    check()
    assert seen, "no valid tick was generated"
    for when in seen:
        state = store.inspect(tick_lock_name(jobs[function], datetime.fromisoformat(when)))
        assert state is not None and state.completed, (when, state)
    store.close()


def test_the_retry_worker_refuses_hostile_events_and_runs_on_its_schedule(
        webhook_handlers: tuple[Any, Any]) -> None:
    _, retry = webhook_handlers

    @HOSTILE
    @given(bad_scheduled_events("webhook_retry"))
    def check(event: Any) -> None:
        with pytest.raises(InvalidEventError):
            retry(event, context("retry"))

    check()
    summary = retry(scheduled_event("webhook_retry", "2031-01-01T00:00:00Z"), context("retry"))
    assert summary["claims_failed"] == 0 and "retry_queue_depth" in summary


# -- the schema custom resource ------------------------------------------------------------------------------


@pytest.fixture
def migration_handler(jobs_db: str, postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("DATABASE_URL", jobs_db)
    monkeypatch.setenv("ONCEONLY_STORE_URL", postgres_url)
    return load("schema_migration")


@st.composite
def custom_resource_requests(draw: st.DrawFn, response_url: str) -> tuple[Any, str]:
    """(event, expected): "refused" (no answer possible), "failed" or "success"."""
    base = json.loads((REPO_ROOT / "events" / "schema_migration.json").read_text(encoding="utf-8"))
    base.update(ResponseURL=response_url, RequestId=str(uuid.uuid4()))
    kind = draw(st.sampled_from(["not_object", "missing", "wrong_type", "not_url", "unknown_request", "valid"]))
    if kind == "not_object":
        return draw(st.one_of(st.none(), st.lists(st.integers(), max_size=2), st.text(max_size=10))), "refused"
    if kind in ("missing", "wrong_type"):
        field = draw(st.sampled_from(["ResponseURL", "StackId", "RequestId", "LogicalResourceId"]))
        if kind == "missing":
            base.pop(field)
        else:
            base[field] = draw(WRONG_TYPES.filter(lambda v: not isinstance(v, str)) | st.just(""))
        return base, "refused"
    if kind == "not_url":
        base["ResponseURL"] = draw(st.sampled_from(["file:///etc/passwd", "ftp://127.0.0.1/x", "127.0.0.1"]))
        return base, "refused"
    if kind == "unknown_request":
        base["RequestType"] = draw(WRONG_TYPES | st.text(max_size=12).filter(
            lambda s: s not in ("Create", "Update", "Delete")))
        return base, "failed"
    base["RequestType"] = draw(st.sampled_from(["Create", "Update", "Delete"]))
    base["ResourceProperties"] = draw(st.dictionaries(st.text(max_size=8), WRONG_TYPES, max_size=3))
    return base, "success"


def test_the_schema_custom_resource_refuses_or_answers_every_request(migration_handler: Any) -> None:
    with ResponseUrl() as cfn:

        @settings(HOSTILE, max_examples=30)
        @given(custom_resource_requests(cfn.url))
        def check(request: tuple[Any, str]) -> None:
            event, expected = request
            before = len(cfn.answers)
            if expected == "refused":
                with pytest.raises(InvalidRequestError, match="not a custom-resource request"):
                    migration_handler(event, context("schema"))
                assert len(cfn.answers) == before  # nobody to answer: nothing sent
                return
            answer = migration_handler(event, context("schema"))
            assert cfn.answers[before:] == [answer]  # exactly one answer, the one returned
            assert answer["RequestId"] == event["RequestId"]
            if expected == "failed":
                assert answer["Status"] == "FAILED" and "unknown RequestType" in answer["Reason"]
                assert answer["Data"] == {}  # the schema step did not run
            else:
                assert answer["Status"] == "SUCCESS", answer

        check()
