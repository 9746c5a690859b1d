"""A subscription's own settings and the receiver's control, against the real
dispatch and retry handlers and a receiver on 127.0.0.1: an abort-message
answer ends the delivery, custom headers reach the receiver but never replace
the signature headers or Host, a supplied secret signs, reading the secret is
audited, and a description and metadata are kept (docs/webhooks.md,
"Managing subscriptions")."""

from __future__ import annotations

import json
import os
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from onceonly_app.webhooks import subscriptions
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.endpoint_settings import MAX_HEADERS, request_headers
from onceonly_app.webhooks.signing import new_secret
from onceonly_app.webhooks.subscriptions import InvalidSubscriptionError
from onceonly_cli.testing.receiver import Reply, WebhookReceiver
from tests.support.cli.cli_support import one_line_error, run_cli
from tests.support.delivery.subscription_fixtures import LOCAL, add_subscription
from tests.support.delivery.webhooks import (
    attempts,
    context,
    deliveries,
    drive_retries,
    lambda_env,
    message,
    new_id,
    sqs_event,
    subscription,
)
from tests.support.functions.events import scheduled_event

ABORT = (("webhook-delivery", "abort-message"),)


def _audit(conn: psycopg.Connection, webhook_id: str) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT action, actor, detail FROM webhook_subscription_audit WHERE webhook_id = %s "
                           "ORDER BY id", (webhook_id,)).fetchall()


# -- abort -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("first_status", [500, 200], ids=["on-a-failure", "after-a-retry"])
def test_abort_message_ends_the_delivery_aborted_with_no_more_attempts(
        pg_env: dict[str, str], webhook_db: str, conn: psycopg.Connection, tenant: str,
        receiver: WebhookReceiver, first_status: int) -> None:
    webhook_id, _ = add_subscription(conn, tenant, receiver)
    event_id = new_id("evt")
    delivery_id = delivery_id_for(webhook_id, event_id)
    # Either the first answer aborts, or a plain failure first and the retry's answer aborts.
    replies = [Reply(422, headers=ABORT)] if first_status == 200 else [Reply(500), Reply(400, headers=ABORT)]
    receiver.script(delivery_id, [*replies, Reply(500), Reply(500)])
    with lambda_env(pg_env) as (dispatch, retry):
        dispatch(sqs_event([message(webhook_id, event_id, tenant_id=tenant)]), context("dispatch"))
        summaries = drive_retries(retry, lambda: deliveries(webhook_db, [delivery_id])[delivery_id]["status"]
                                  == "aborted")
        for _ in range(3):  # the schedule (0.2 s) would have retried by now: nothing is left to claim
            summaries.append(retry(scheduled_event("webhook_retry"), context("retry", 20)))
    row = deliveries(webhook_db, [delivery_id])[delivery_id]
    assert (row["status"], row["response_code"]) == ("aborted", replies[-1].status)
    assert "abort-message" in row["last_error"]
    assert len(receiver.history(delivery_id)) == len(replies)  # no attempt after the abort
    assert [a["outcome"] for a in attempts(webhook_db, [delivery_id])][-1] == "aborted"
    aborted_by_retry = sum(s.get("aborted", 0) for s in summaries)
    assert aborted_by_retry == (1 if first_status == 500 else 0)  # the retry handler counts it


def test_a_success_with_the_abort_header_is_a_success(
        pg_env: dict[str, str], webhook_db: str, conn: psycopg.Connection, tenant: str,
        receiver: WebhookReceiver) -> None:
    webhook_id, _ = add_subscription(conn, tenant, receiver)
    event_id = new_id("evt")
    delivery_id = delivery_id_for(webhook_id, event_id)
    receiver.script(delivery_id, [Reply(200, headers=ABORT)])
    with lambda_env(pg_env) as (dispatch, _):
        dispatch(sqs_event([message(webhook_id, event_id, tenant_id=tenant)]), context("dispatch"))
    assert deliveries(webhook_db, [delivery_id])[delivery_id]["status"] == "succeeded"


def test_status_shows_aborted_deliveries(
        pg_env: dict[str, str], webhook_db: str, conn: psycopg.Connection, tenant: str,
        receiver: WebhookReceiver) -> None:
    webhook_id, _ = add_subscription(conn, tenant, receiver)
    event_id = new_id("evt")
    receiver.script(delivery_id_for(webhook_id, event_id), [Reply(409, headers=ABORT)])
    with lambda_env(pg_env) as (dispatch, _):
        dispatch(sqs_event([message(webhook_id, event_id, tenant_id=tenant)]), context("dispatch"))
    done = run_cli("status", "--json", "--database", webhook_db, "--store", pg_env["ONCEONLY_STORE_URL"])
    assert done.returncode == 0, done.stderr
    (mine,) = [s for s in json.loads(done.stdout)["subscriptions"] if s["id"] == webhook_id]
    assert mine["deliveries"]["aborted"] == 1


# -- custom headers ----------------------------------------------------------------------------------------

def test_custom_headers_reach_the_receiver_and_never_replace_signature_headers_or_host(
        pg_env: dict[str, str], webhook_db: str, conn: psycopg.Connection, tenant: str,
        receiver: WebhookReceiver) -> None:
    webhook_id, _ = add_subscription(conn, tenant, receiver,
                                     headers={"Authorization": "Bearer gw-token", "X-Route": "eu"})
    # A row written by other means (not through the checks) still cannot override them.
    conn.execute("UPDATE webhook_subscriptions SET headers = headers || %s::jsonb WHERE id = %s",
                 (json.dumps({"WEBHOOK-SIGNATURE": "v1,forged", "host": "evil.test", "Webhook-Id": "msg_forged",
                              "svix-signature": "v1,forged", "Content-Type": "text/evil"}), webhook_id))
    event_id = new_id("evt")
    delivery_id = delivery_id_for(webhook_id, event_id)
    with lambda_env(pg_env) as (dispatch, _):
        dispatch(sqs_event([message(webhook_id, event_id, tenant_id=tenant)]), context("dispatch"))
    (request,) = receiver.history(delivery_id)
    headers = {name.lower(): value for name, value in request.headers.items()}
    assert request.verified and request.status == 200  # the real signature, verified by the receiver
    assert headers["authorization"] == "Bearer gw-token" and headers["x-route"] == "eu"
    assert headers["webhook-id"] == delivery_id and "forged" not in headers["webhook-signature"]
    assert headers["host"].startswith("127.0.0.1") and headers["content-type"] == "application/json"
    assert "svix-signature" not in headers
    # Every header name arrived once: none was sent twice under another letter case.
    names = [name.lower() for name in request.headers]
    assert len(names) == len(set(names))


def test_request_headers_drop_reserved_names_in_any_case() -> None:
    signed = {"webhook-id": "msg_1", "webhook-timestamp": "1", "webhook-signature": "v1,x"}
    merged = request_headers({"Webhook-ID": "forged", "HOST": "x", "X-Ok": "1"}, signed)
    assert merged == {"X-Ok": "1", **signed}


@pytest.mark.parametrize("headers, why", [
    ({"webhook-signature": "v1,x"}, "cannot be overridden"),
    ({"Host": "evil.test"}, "cannot be overridden"),
    ({"Webhook-Timestamp": "1"}, "cannot be overridden"),
    ({"svix-id": "x"}, "cannot be overridden"),
    ({"Content-Length": "1"}, "cannot be overridden"),
    ({"X-A": "line\r\nInjected: yes"}, "without line breaks"),
    ({"Bad Name": "x"}, "token characters"),
    ({"X-A": "1", "x-a": "2"}, "named twice"),
    ({f"X-{n}": "v" for n in range(MAX_HEADERS + 1)}, f"at most {MAX_HEADERS}"),
    ({"X-A": "v" * 1025}, "at most 1024"),
])
def test_bad_custom_headers_are_refused_and_nothing_is_written(
        conn: psycopg.Connection, tenant: str, headers: dict[str, str], why: str) -> None:
    with pytest.raises(InvalidSubscriptionError, match=why):
        subscriptions.add(conn, tenant, "http://127.0.0.1:9/", allow_http_hosts=LOCAL, headers=headers)
    kept = subscriptions.add(conn, tenant, "http://127.0.0.1:9/", allow_http_hosts=LOCAL,
                             headers={"X-Kept": "1"})
    with pytest.raises(InvalidSubscriptionError, match=why):
        subscriptions.configure(conn, kept.id, headers=headers)
    assert subscription(conn.info.dsn, kept.id)["headers"] == {"X-Kept": "1"}
    assert conn.execute("SELECT count(*) FROM webhook_subscriptions WHERE tenant_id = %s",
                        (tenant,)).fetchone() == (1,)


# -- description, metadata, audit ---------------------------------------------------------------------------

def test_configure_sets_description_metadata_and_headers_audited_without_header_values(
        conn: psycopg.Connection, tenant: str) -> None:
    added = subscriptions.add(conn, tenant, "http://127.0.0.1:9/", allow_http_hosts=LOCAL,
                              description="orders gateway", metadata={"team": "payments"})
    changed = subscriptions.configure(conn, added.id, headers={"Authorization": "Bearer s3cret"},
                                      metadata={"team": "billing", "tier": 2}, actor="carol")
    assert set(changed) == {"headers", "metadata"}
    assert subscriptions.configure(conn, added.id, description="orders gateway") == {}  # unchanged: no audit row
    shown = subscriptions.show(conn, added.id)
    assert (shown["description"], shown["metadata"], shown["header_names"]) == \
        ("orders gateway", {"team": "billing", "tier": 2}, ["Authorization"])
    audit = _audit(conn, added.id)
    assert [row["action"] for row in audit] == ["add", "configure"]
    assert audit[0]["detail"]["description"] == "orders gateway"
    assert audit[1]["actor"] == "carol" and audit[1]["detail"]["headers"]["to"] == ["Authorization"]
    assert "s3cret" not in json.dumps(audit) and "s3cret" not in json.dumps(shown, default=str)
    with pytest.raises(InvalidSubscriptionError, match="metadata"):
        subscriptions.configure(conn, added.id, metadata=["not", "an", "object"])  # type: ignore[arg-type]
    with pytest.raises(InvalidSubscriptionError, match="description"):
        subscriptions.configure(conn, added.id, description="x" * 501)
    with pytest.raises(InvalidSubscriptionError, match="nothing to change"):
        subscriptions.configure(conn, added.id)


# -- supplied secrets and reading the secret -----------------------------------------------------------------

def test_a_supplied_secret_signs_and_a_supplied_rotation_keeps_both_signing(
        pg_env: dict[str, str], webhook_db: str, conn: psycopg.Connection, tenant: str,
        receiver: WebhookReceiver) -> None:
    migrated = new_secret()  # as another sender made it
    webhook_id, _ = add_subscription(conn, tenant, receiver, secret=migrated)
    assert subscriptions.current_secret(conn, webhook_id, actor="dave") == migrated
    rotated = new_secret()
    assert subscriptions.rotate_secret(conn, webhook_id, secret=rotated, actor="dave") == rotated
    event_id = new_id("evt")
    with lambda_env(pg_env) as (dispatch, _):
        dispatch(sqs_event([message(webhook_id, event_id, tenant_id=tenant)]), context("dispatch"))
    (request,) = receiver.history(delivery_id_for(webhook_id, event_id))
    assert request.verified  # the receiver still verifies with the migrated secret: both sign in the overlap
    assert len(request.headers["webhook-signature"].split()) == 2
    assert subscriptions.current_secret(conn, webhook_id) == rotated
    audit = _audit(conn, webhook_id)
    assert [(row["action"], row["actor"]) for row in audit][1:] == [
        ("secret-read", "dave"), ("rotate-secret", "dave"), ("secret-read", "onceonly-app")]
    assert audit[0]["detail"]["secret_supplied"] is True and audit[2]["detail"]["secret_supplied"] is True
    assert migrated not in json.dumps(audit) and rotated not in json.dumps(audit)


@pytest.mark.parametrize("secret, why", [
    ("sk_live_abc", "must start with whsec_"),
    ("whsec_not base64!", "base64"),
    ("whsec_" + "QUJD", "24-64 bytes"),
])
def test_a_bad_supplied_secret_is_refused_and_nothing_changes(
        conn: psycopg.Connection, tenant: str, secret: str, why: str) -> None:
    with pytest.raises(InvalidSubscriptionError, match=why):
        subscriptions.add(conn, tenant, "http://127.0.0.1:9/", allow_http_hosts=LOCAL, secret=secret)
    added = subscriptions.add(conn, tenant, "http://127.0.0.1:9/", allow_http_hosts=LOCAL)
    with pytest.raises(InvalidSubscriptionError, match=why):
        subscriptions.rotate_secret(conn, added.id, secret=secret)
    assert subscription(conn.info.dsn, added.id)["secret"] == added.secret
    assert [row["action"] for row in _audit(conn, added.id)] == ["add"]


def test_the_cli_sets_headers_and_secrets_and_prints_the_secret_audited(
        webhook_db: str, conn: psycopg.Connection, tenant: str) -> None:
    supplied = new_secret()
    base = ("--database", webhook_db, "--json")
    env = {**os.environ, "WEBHOOK_ALLOW_HTTP_HOSTS": "127.0.0.1"}
    done = run_cli("subscriptions", "add", "--tenant", tenant, "--url", "http://127.0.0.1:9/in",
                   "--secret", supplied, "--header", "Authorization: Bearer t", "--description", "gw",
                   "--metadata", '{"team": "ops"}', *base, env=env)
    assert done.returncode == 0, done.stderr
    webhook_id = json.loads(done.stdout)["id"]
    assert json.loads(done.stdout)["secret"] == supplied
    done = run_cli("subscriptions", "secret", webhook_id, "--actor", "erin", *base)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["secret"] == supplied
    done = run_cli("subscriptions", "update", webhook_id, "--header", "X-Route: eu", "--description", "gw2",
                   *base)
    assert done.returncode == 0, done.stderr
    row = subscription(webhook_db, webhook_id)
    assert (row["headers"], row["description"], row["metadata"]) == ({"X-Route": "eu"}, "gw2", {"team": "ops"})
    done = run_cli("subscriptions", "rotate-secret", webhook_id, "--secret", "whsec_QUJD", *base)
    assert done.returncode != 0 and "24-64 bytes" in one_line_error(done)
    done = run_cli("subscriptions", "update", webhook_id, "--header", "Host: evil.test", *base)
    assert done.returncode != 0 and "cannot be overridden" in one_line_error(done)
    rotated = new_secret()
    done = run_cli("subscriptions", "rotate-secret", webhook_id, "--secret", rotated, *base)
    assert done.returncode == 0 and json.loads(done.stdout)["secret"] == rotated, done.stderr
    assert subscription(webhook_db, webhook_id)["secret"] == rotated
    assert [row["action"] for row in _audit(conn, webhook_id)] == ["add", "secret-read", "configure",
                                                                   "rotate-secret"]
