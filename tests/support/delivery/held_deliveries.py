"""A subscription with deliveries held while it is disabled: a backlog that
`enable` releases all at once, for the tests of delivery under limits."""

from __future__ import annotations

from typing import Any

import psycopg

from onceonly_app.webhooks import subscriptions
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_cli.testing.receiver import Behaviour, WebhookReceiver
from tests.support.delivery.webhooks import context, deliveries, lambda_env, message, new_id, sqs_event

LOCAL = frozenset({"127.0.0.1"})


def new_tenant(conn: psycopg.Connection[Any]) -> str:
    """A tenant billing knows (its settings row)."""
    tenant = new_id("tenant")
    conn.execute("INSERT INTO billing_tenants (tenant_id) VALUES (%s)", (tenant,))
    return tenant


def held_subscription(conn: psycopg.Connection[Any], env: dict[str, str], receiver: WebhookReceiver, events: int,
                      behaviour: Behaviour | None = None, **limits: Any) -> tuple[str, list[str]]:
    """A subscription (with ``limits``) to a new endpoint of ``receiver``,
    disabled, with ``events`` events dispatched by the real handler and held.
    Returns its id and the delivery ids in event order; nothing was sent yet."""
    added = subscriptions.add(conn, new_tenant(conn), "http://127.0.0.1:9/", allow_http_hosts=LOCAL, **limits)
    url = receiver.endpoint(new_id("ep"), added.secret, behaviour)
    subscriptions.update(conn, added.id, url=url, allow_http_hosts=LOCAL)
    tenant = str(subscriptions.show(conn, added.id)["tenant_id"])
    subscriptions.disable(conn, added.id, "filling the queue")
    event_ids = [new_id("evt") for _ in range(events)]
    with lambda_env(env) as (dispatch, _):
        assert dispatch(sqs_event([message(added.id, e, tenant_id=tenant) for e in event_ids]),
                        context("dispatch")) == {"batchItemFailures": []}
    expected = [delivery_id_for(added.id, e) for e in event_ids]
    assert {r["status"] for r in deliveries(env["DATABASE_URL"], expected).values()} == {"held"}
    assert [r for r in receiver.history() if r.webhook_id in expected] == []
    return added.id, expected
