"""Every DynamoDB call the webhook handlers and the schema step make is one
their own role grants, and each role grants no DynamoDB action they never
call: the real handlers on dynalite, their calls recorded with botocore's
hook, against the roles of the deployed template (StoreKind dynamodb).

dynalite has no transactions: the store then writes item by item with the
same operations, so those are recorded; on AWS, IAM authorizes a
TransactWriteItems by the actions of its items the same way."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import onceonly
from onceonly_app.db.clients import coordination_store
from onceonly_app.schema_step import apply_schema
from onceonly_cli.testing.receiver import Behaviour, WebhookReceiver
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
from tests.support.deploy.iam import as_list, deployed, function_roles
from tests.support.servers.scratch import delete_table, scratch_database
from tests.support.stores.api_calls import ApiCalls

AUTHORIZED_BY_ITS_ITEMS = {"TransactWriteItems"}
# dynalite keeps no TTL setting, so setup() turns it on every time; the
# template's table is declared with it, so on AWS setup() never calls this.
DYNALITE_ONLY = {"UpdateTimeToLive"}


def dynamodb_actions(template: dict[str, Any], function: str) -> set[str]:
    role = template["Resources"][function_roles(template)[function]]["Properties"]
    statements = [statement for policy in role["Policies"] for statement in policy["PolicyDocument"]["Statement"]]
    return {action.split(":", 1)[1] for statement in statements for action in as_list(statement["Action"])
            if action.startswith("dynamodb:")}


@pytest.fixture
def table_url(dynalite_endpoint: str, unique: str) -> Iterator[str]:
    url = f"dynamodb://onceonly-roles-{unique}?region=us-east-1&endpoint_url={dynalite_endpoint}"
    store = onceonly.connect(url)
    store.setup()
    store.close()
    yield url
    delete_table(url)


def test_the_webhook_handlers_call_what_their_roles_grant_and_nothing_more(
        webhook_db: str, table_url: str, receiver: WebhookReceiver, unique: str) -> None:
    template = deployed("dynamodb")
    webhook = subscribe(webhook_db, receiver, Behaviour(fail_first=1))
    with lambda_env(webhook_env(webhook_db, table_url, WEBHOOK_QUEUE=f"roles-{unique}",
                                WEBHOOK_RETRY_SCHEDULE_SECONDS="0.2")) as (dispatch, retry):
        client = coordination_store()._table.client  # type: ignore[attr-defined]  # the handlers' own
        with ApiCalls(client) as dispatched:
            dispatch(sqs_event([message(webhook, f"evt-{unique}")]), context("dispatch"))
        with ApiCalls(client) as retried:
            drive_retries(retry, lambda: deliveries_for(webhook_db, [webhook])[0]["status"] == "succeeded")
    for function, calls in (("WebhookDispatchFunction", dispatched), ("WebhookRetryFunction", retried)):
        called = set(calls.counts) - AUTHORIZED_BY_ITS_ITEMS
        granted = dynamodb_actions(template, function)
        assert called <= granted, (function, called - granted)
        assert called, function  # the calls were recorded
    # Between them, the two handlers use every action either role grants.
    granted = dynamodb_actions(template, "WebhookDispatchFunction") | dynamodb_actions(template, "WebhookRetryFunction")
    assert granted == (set(dispatched.counts) | set(retried.counts)) - AUTHORIZED_BY_ITS_ITEMS
    assert not granted & {"Scan", "BatchWriteItem", "BatchGetItem", "PutItem"}


def test_the_schema_step_calls_what_its_role_grants(postgres_server_url: str, table_url: str) -> None:
    granted = dynamodb_actions(deployed("dynamodb"), "SchemaMigrationFunction")
    calls: list[ApiCalls] = []
    real_connect = onceonly.connect

    def recorded(url: str, **kwargs: Any) -> onceonly.Store:
        store = real_connect(url, **kwargs)
        calls.append(ApiCalls(store._table.client).__enter__())  # type: ignore[attr-defined]
        return store

    with scratch_database(postgres_server_url, "onceonly_roles") as db, pytest.MonkeyPatch.context() as patch:
        patch.setattr(onceonly, "connect", recorded)
        apply_schema(db, table_url)  # first record: the marker granted
        apply_schema(db, table_url, force_repair=True)
    called = set().union(*(set(c.counts) for c in calls)) - AUTHORIZED_BY_ITS_ITEMS - DYNALITE_ONLY
    assert {"DescribeTable", "GetItem", "UpdateItem"} <= called
    assert called <= granted, called - granted
