"""A new coordination store under an existing domain database: the schema
step notices (the store's own marker, not its URL), resets the fences the old
store's tokens left, and re-queues what the old store's queue held, in the
migration's transaction. Replayed with the real handlers on a real
PostgreSQL and Redis: the payment watcher applies a payment on its first tick
after the switch, and a retry stranded in the old store is delivered. Then
the transitions around it: the step run twice, an emptied store at the same
URL, a second stack on the database, and `onceonly migrate` as the same
repair by hand."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import onceonly
from onceonly_app.billing.payment_watcher import cursor_name
from onceonly_app.db.store_identity import MARKER, identify, location
from onceonly_app.db.store_switch import StackConflictError, stack_of
from onceonly_app.schema_step import apply_schema
from onceonly_cli.testing.fake_payments import FakePayments
from onceonly_cli.testing.receiver import Behaviour, WebhookReceiver
from tests.support.cli.cli_support import one_line_error, run_cli
from tests.support.delivery.webhooks import (
    context,
    deliveries_for,
    drive_retries,
    lambda_env,
    message,
    sqs_event,
    subscribe,
    webhook_env,
)
from tests.support.functions.events import scheduled_event
from tests.support.functions.identity_workers import identify_after_start_line
from tests.support.jobs import jobs_data as data
from tests.support.jobs.jobs_helpers import make_scope, payments_env
from tests.support.jobs.jobs_workers import Replicas
from tests.support.races.race import run_workers
from tests.support.servers.scratch import delete_prefix, scratch_database, scratch_redis_prefix

STACK = "arn:aws:cloudformation:us-east-1:123456789012:stack/billing/0a1b2c3d"
OTHER_STACK = "arn:aws:cloudformation:us-east-1:123456789012:stack/billing-staging/4e5f6a7b"


@pytest.fixture
def db(postgres_server_url: str) -> Iterator[str]:
    with scratch_database(postgres_server_url, "onceonly_switch") as url:
        yield url


@pytest.fixture
def old_store(redis_server_url: str) -> Iterator[str]:
    with scratch_redis_prefix(redis_server_url, "onceonly-switch") as url:
        yield url


def fences(db: str, poller: str) -> list[int]:
    with data.connect(db) as conn:
        return [r["fence_token"] for r in data.rows(conn, "SELECT fence_token FROM payment_cursors"
                                                          " WHERE poller = %s", poller)]


def watcher_tick(replicas: Replicas, scope: Any, minute: int, pay_env: dict[str, str]) -> dict[str, Any]:
    """One run of the real PaymentWatcherFunction, in its own process, as its schedule starts it."""
    name = f"watcher-{minute}"
    proc = replicas.start(scope.invocation("payment_watcher",
                                           scheduled_event("payment_watcher", f"2026-11-29T10:{minute:02d}:00Z"),
                                           **pay_env), name=name)
    replicas.join(proc)
    record = replicas.record(name)
    assert "outcome" in record, record
    return record["outcome"]  # type: ignore[no-any-return]


def test_a_new_store_loses_no_payment_and_no_retry(
        db: str, old_store: str, replicas: Replicas, fake_payments: FakePayments, receiver: WebhookReceiver,
        moto_endpoint: str, ses_sender: str, sqs_queue: str, unique: str) -> None:
    new_store = db  # StoreKind redis -> postgresql (the domain database itself)
    first = apply_schema(db, old_store, stack=stack_of(STACK)).store_switch
    assert first.action == "first-record" and first.store.kind == "redis"

    # Billing on the old store: three ticks, three poller leases; the cursor keeps the last one's token
    # (a count on some stores, floored by the server's clock on Redis: either way far above a new store's 1).
    old_scope = make_scope(db, old_store, moto_endpoint, ses_sender, unique)
    with data.connect(db) as conn:
        data.add_receiving_account(conn, old_scope.tenant, fake_payments.receiver)
        invoice = data.add_invoice(conn, old_scope.tenant, due_at="2026-12-20T00:00:00Z", amount_cents=1250)
    pay_env = payments_env(fake_payments, sqs_queue)
    for minute in (1, 2, 3):
        assert watcher_tick(replicas, old_scope, minute, pay_env)["status"] == "ran"
    cursor = cursor_name(old_scope.job, fake_payments.receiver)  # the receiving account's feed
    (old_fence,) = fences(db, cursor)
    assert old_fence >= 3

    # Webhooks on the old store: the first attempt fails, the retry waits in the old store's queue.
    webhook = subscribe(db, receiver, Behaviour(fail_first=1))
    with lambda_env(webhook_env(db, old_store, WEBHOOK_RETRY_SCHEDULE_SECONDS="1")) as (dispatch, _):
        dispatch(sqs_event([message(webhook, "evt-stranded")]), context("dispatch"))
    (stranded,) = deliveries_for(db, [webhook])
    assert stranded["status"] == "retrying" and stranded["generation"] == 0

    # The switch: the schema step of the deploy that changed StoreKind.
    switched = apply_schema(db, new_store, stack=stack_of(STACK)).store_switch
    assert switched.action == "switched" and switched.store.kind == "postgresql", switched
    assert switched.cursors_reset == 1 and switched.deliveries_requeued == 1, switched
    assert fences(db, cursor) == [0]
    again = apply_schema(db, new_store, stack=stack_of(STACK)).store_switch  # the next deploy: nothing to do
    assert again.action == "unchanged" and again.deliveries_requeued == 0
    with data.connect(db) as conn:
        log = data.rows(conn, "SELECT reason, from_kind, to_kind, cursors_reset, deliveries_requeued"
                              " FROM appdb_store_switches ORDER BY id")
    assert log == [{"reason": "first-record", "from_kind": None, "to_kind": "redis", "cursors_reset": 0,
                    "deliveries_requeued": 0},
                   {"reason": "switched", "from_kind": "redis", "to_kind": "postgresql", "cursors_reset": 1,
                    "deliveries_requeued": 1}]

    # A payment after the switch: the new store's first poller lease (token 1) applies it.
    fake_payments.add(memo=invoice, amount="12.50")
    new_scope = make_scope(db, new_store, moto_endpoint, ses_sender, unique)
    outcome = watcher_tick(replicas, new_scope, 4, pay_env)
    assert outcome["status"] == "ran" and outcome["token"] == 1, outcome
    assert outcome["result"]["payments_applied"] == 1 and outcome["result"]["invoices_paid"] == 1
    with data.connect(db) as conn:
        assert data.rows(conn, "SELECT status FROM invoices WHERE id = %s", invoice) == [{"status": "paid"}]

    # The stranded retry: the retry function on the new store delivers it.
    with lambda_env(webhook_env(db, new_store, WEBHOOK_RETRY_SCHEDULE_SECONDS="1")) as (_, retry):
        drive_retries(retry, lambda: deliveries_for(db, [webhook])[0]["status"] == "succeeded")
    (delivered,) = deliveries_for(db, [webhook])
    assert delivered["generation"] == 1 and delivered["attempts"] == 2
    requests = [r for r in receiver.requests if r.webhook_id == stranded["id"]]
    assert [r.status for r in requests] == [500, 200]


def test_an_emptied_store_at_the_same_url_is_a_new_store(db: str, old_store: str) -> None:
    """A table made anew under its old name (`sam delete` + `sam deploy`): the
    URL is the same, the store's marker is not."""
    assert apply_schema(db, old_store).store_switch.action == "first-record"
    assert apply_schema(db, old_store).store_switch.action == "unchanged"
    delete_prefix(old_store)  # the store loses everything, the database keeps its fences
    emptied = apply_schema(db, old_store).store_switch
    assert emptied.action == "switched" and emptied.previous is not None
    assert emptied.previous.split()[1] != emptied.store.instance


def test_many_processes_asking_a_new_store_at_once_get_one_identity(old_store: str, tmp_path: Path) -> None:
    """Schema steps (or `onceonly migrate`) of one store racing on its first
    use: one marker is granted, every one of them reads that one."""
    events = run_workers(identify_after_start_line, 6, tmp_path / "identify", old_store, won=lambda e: True)
    assert len(events) == 6
    overlapping = [(a["worker"], b["worker"]) for a in events for b in events
                   if a["worker"] < b["worker"] and a["started"] < b["ended"] and b["started"] < a["ended"]]
    assert overlapping, "no two workers asked at the same time"
    assert len({e["instance"] for e in events}) == 1
    store = onceonly.connect(old_store)
    try:
        state = store.inspect(MARKER)
        assert state is not None and state.owner == events[0]["instance"]
        assert state.busy_until > time.time() + 9 * 365 * 86400  # held for ten years: never free to re-grant
        assert identify(store, old_store).instance == state.owner  # a later caller reads the same
    finally:
        store.close()


def test_the_location_keeps_no_credentials() -> None:
    assert location("rediss://:s3cret@cache.example:6380/0?prefix=p&wait_replicas=1") == \
        "rediss://cache.example:6380/0?prefix=p"
    assert location("postgresql://app:pw@db.internal/billing?sslmode=verify-full") == \
        "postgresql://db.internal/billing"
    assert stack_of(STACK) == "arn:aws:cloudformation:us-east-1:123456789012:stack/billing"


def test_a_second_stack_on_the_database_is_refused_until_handed_over(db: str, old_store: str) -> None:
    apply_schema(db, old_store, stack=stack_of(STACK))
    # The same stack deleted and created again (a new run id): the same owner.
    assert apply_schema(db, old_store, stack=stack_of(STACK[:-8] + "99999999")).store_switch.action == "unchanged"
    with pytest.raises(StackConflictError, match="another stack .*stack/billing\\)"):
        apply_schema(db, old_store, stack=stack_of(OTHER_STACK))
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT stack FROM appdb_store_identity").fetchall() == [(stack_of(STACK),)]
    # By hand, on purpose: the database is handed over, and the new stack's step goes through.
    handed = run_cli("migrate", "--database", db, "--store", old_store, "--stack", OTHER_STACK)
    assert handed.returncode == 0, handed.stderr
    assert "store stack-handover" in handed.stdout
    assert apply_schema(db, old_store, stack=stack_of(OTHER_STACK)).store_switch.action == "unchanged"
    refused = one_line_error(run_cli("migrate", "--database", db, "--store", old_store, "--stack", "billing"))
    assert "--stack needs a CloudFormation stack id" in refused


def test_onceonly_migrate_repairs_by_hand_and_again_on_request(db: str, old_store: str, receiver: WebhookReceiver
                                                               ) -> None:
    """The same repair as the deploy's, from the command line; ``--repair``
    runs it although the store looks unchanged (what the old functions queued
    while the deploy switched them), and is safe to run twice."""
    apply_schema(db, old_store)
    webhook = subscribe(db, receiver, Behaviour(fail_first=1))
    with lambda_env(webhook_env(db, old_store, WEBHOOK_RETRY_SCHEDULE_SECONDS="3600")) as (dispatch, _):
        dispatch(sqs_event([message(webhook, "evt-cli")]), context("dispatch"))
    moved = run_cli("migrate", "--database", db, "--store", db)
    assert moved.returncode == 0, moved.stderr
    assert "store switched" in moved.stdout and "1 delivery(ies) re-queued" in moved.stdout
    for _ in range(2):
        forced = run_cli("migrate", "--database", db, "--store", db, "--repair")
        assert forced.returncode == 0 and "store forced" in forced.stdout, forced.stderr
    store = onceonly.connect(db)
    try:
        depth = store.queue("webhook-retries").depth()
    finally:
        store.close()
    (delivery,) = deliveries_for(db, [webhook])
    assert delivery["generation"] == 3 and delivery["status"] == "retrying"
    assert depth.total == 1  # one item, however many repairs
