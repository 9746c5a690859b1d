"""The first requests of a batch are admitted together (one take_permits for
them all), and an admission that no request uses is given back at once, not
held until its ttl: here, records refused by the SSRF guard after their
admission, in an SQS batch and in a claimed retry batch. Every endpoint has a
cap of 1, so a permit left taken would hold back its next request."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

import onceonly
from onceonly_app.webhooks.endpoint_limits import semaphore_name
from onceonly_cli.testing.receiver import Behaviour, WebhookReceiver
from tests.support.delivery.webhooks import context, lambda_env, message, new_id, sqs_event, subscribe, webhook_env
from tests.support.functions.events import scheduled_event

REFUSED_URL = "http://10.0.0.1/hook"  # plain http to a host not allowed: refused before any lookup


@pytest.fixture(params=["postgres", "redis"])
def store_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_url"))


@contextmanager
def counted_takes() -> Iterator[Counter[int]]:
    """How many wants each take_permits call of the handlers' coordination store carried."""
    from onceonly_app.db import clients

    takes: Counter[int] = Counter()
    store = clients.coordination_store()
    take = store.take_permits

    def counted(wants: Any, ttl: float = 30.0) -> Any:
        takes[len(wants)] += 1
        return take(wants, ttl)

    store.take_permits = counted  # type: ignore[method-assign]
    try:
        yield takes
    finally:
        del store.take_permits


def _cap_one(webhook_db: str, webhook_ids: list[str], refused: Sequence[str] = ()) -> None:
    with psycopg.connect(webhook_db, autocommit=True) as conn:
        conn.execute("UPDATE webhook_subscriptions SET max_in_flight = 1 WHERE id = ANY(%s)", (webhook_ids,))
        # As a URL stored before the guard refused it at add: the sender refuses it.
        conn.execute("UPDATE webhook_subscriptions SET url = %s WHERE id = ANY(%s)", (REFUSED_URL, list(refused)))


def _refused_before_any_lookup(webhook_db: str, webhook_ids: list[str]) -> bool:
    """Every delivery of ``webhook_ids`` ended on the guard's scheme check, which
    comes before any DNS lookup or connection: 10.0.0.1 is never dialled."""
    with psycopg.connect(webhook_db) as conn:
        errors = [row[0] for row in conn.execute(
            "SELECT last_error FROM webhook_deliveries WHERE webhook_id = ANY(%s)", (webhook_ids,))]
    return bool(errors) and all(e.startswith("refused by the SSRF guard: scheme 'http' refused") for e in errors)


def _statuses(webhook_db: str, webhook_ids: list[str]) -> list[str]:
    with psycopg.connect(webhook_db) as conn:
        found: dict[str, str] = dict(conn.execute(
            "SELECT webhook_id, status FROM webhook_deliveries WHERE webhook_id = ANY(%s)", (webhook_ids,)).fetchall())
    return [found[w] for w in webhook_ids]


def _every_place_free(store: onceonly.Store, webhook_ids: list[str]) -> bool:
    for webhook_id in webhook_ids:
        permit = store.take_permit(semaphore_name(webhook_id), 1, ttl=30)
        if permit is None:
            return False
        store.return_permit(permit)
    return True


def _assert_every_place_free(store: onceonly.Store, webhook_ids: list[str]) -> None:
    assert _every_place_free(store, webhook_ids), "a permit was left taken"


def test_an_sqs_batch_admits_together_and_gives_unused_admissions_back(
        webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver) -> None:
    """The refused records' permits are given back as soon as they are refused:
    while the batch's other requests are still on the wire (1 s each)."""
    refused = [subscribe(webhook_db, receiver) for _ in range(2)]
    sent = [subscribe(webhook_db, receiver, Behaviour(latency=1.0)) for _ in range(3)]
    _cap_one(webhook_db, refused + sent, refused)
    env = webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=new_id("webhook-retries"), WEBHOOK_MAX_IN_FLIGHT="10")
    with lambda_env(env) as (dispatch, _), counted_takes() as takes, ThreadPoolExecutor(1) as running:
        answer = running.submit(dispatch, sqs_event([message(w, new_id("evt")) for w in refused + sent]),
                                context("dispatch", 30))
        assert receiver.wait_for(lambda received: len(received) == 3, timeout=10)
        # the refusals are given back beside the sends, not after them: free
        # while the batch's requests are still on the wire
        while not _every_place_free(store, refused):
            assert not answer.done(), "a refused record's permit was held until the batch ended"
            time.sleep(0.01)
        assert not answer.done(), "the batch ended before its requests were seen in flight"
        assert answer.result() == {"batchItemFailures": []}
    assert takes == Counter({5: 1}), "the batch's requests were not admitted together"
    assert sorted(receiver.successes().values()) == [1, 1, 1]
    assert _statuses(webhook_db, refused + sent) == ["dead"] * 2 + ["succeeded"] * 3
    assert _refused_before_any_lookup(webhook_db, refused)
    _assert_every_place_free(store, refused + sent)


def test_a_retry_batch_admits_together_and_gives_unused_admissions_back(
        webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver) -> None:
    webhook_ids = [subscribe(webhook_db, receiver, Behaviour(fail_first=1)) for _ in range(3)]
    _cap_one(webhook_db, webhook_ids)
    env = webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=new_id("webhook-retries"), WEBHOOK_MAX_IN_FLIGHT="10",
                      WEBHOOK_CLAIM_BATCH="10")
    with lambda_env(env) as (dispatch, retry):
        dispatch(sqs_event([message(w, new_id("evt")) for w in webhook_ids]), context("dispatch", 30))
        assert _statuses(webhook_db, webhook_ids) == ["retrying"] * 3  # each first attempt failed
        _cap_one(webhook_db, webhook_ids, webhook_ids[:1])
        time.sleep(0.5)  # the retries are due (WEBHOOK_RETRY_SCHEDULE_SECONDS 0.2 s)
        with counted_takes() as takes:
            retry(scheduled_event("webhook_retry"), context("retry", 30))
    assert takes == Counter({3: 1}), "the claimed batch's requests were not admitted together"
    assert _statuses(webhook_db, webhook_ids) == ["dead", "succeeded", "succeeded"]
    assert _refused_before_any_lookup(webhook_db, webhook_ids[:1])
    _assert_every_place_free(store, webhook_ids)


def test_a_batchs_later_record_to_an_endpoint_finds_the_earlier_ones_place_free(
        webhook_db: str, store: onceonly.Store, store_url: str, receiver: WebhookReceiver) -> None:
    """One worker, three records to one endpoint of cap 1: each finds the place
    its predecessor gave back at once (only an endpoint's last record of the
    batch gives its permit back on the returns thread), so none is held back."""
    webhook_id = subscribe(webhook_db, receiver)
    _cap_one(webhook_db, [webhook_id])
    env = webhook_env(webhook_db, store_url, WEBHOOK_QUEUE=new_id("webhook-retries"), WEBHOOK_MAX_IN_FLIGHT="1")
    with lambda_env(env) as (dispatch, _):
        answer = dispatch(sqs_event([message(webhook_id, new_id("evt")) for _ in range(3)]), context("dispatch", 30))
    assert answer == {"batchItemFailures": []}
    with psycopg.connect(webhook_db) as conn:
        rows = conn.execute("SELECT status, deferrals FROM webhook_deliveries WHERE webhook_id = %s",
                            (webhook_id,)).fetchall()
    assert rows == [("succeeded", 0)] * 3
