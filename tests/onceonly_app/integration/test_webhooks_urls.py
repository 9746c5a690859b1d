"""Webhook URLs end to end (docs/webhooks.md, "URLs"): add/update store the
encoded URL or refuse it with one line and nothing written; the real handlers
send a path with a space, DEL or non-ASCII character to the endpoint it names;
an IDN host goes out IDNA-encoded in the Host header and the SNI alike; a URL
stored raw before any of this is encoded at send time, or fails its attempt
with the reason, never a crash or a dead delivery without an outcome."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from onceonly_app.runtime.budget import Budget
from onceonly_app.webhooks import subscriptions
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.sender import WebhookSender
from onceonly_app.webhooks.signing import new_secret, signed_headers
from onceonly_app.webhooks.ssrf import check_target
from onceonly_app.webhooks.subscriptions import InvalidSubscriptionError
from onceonly_cli.testing.receiver import WebhookReceiver
from tests.support.cli.cli_support import one_line_error, run_cli
from tests.support.delivery.held_deliveries import LOCAL, new_tenant
from tests.support.delivery.webhooks import attempts, context, deliveries, lambda_env, message, new_id, sqs_event

RAW_PATH = "/in box\x7f\u00fc"  # a space, DEL and a non-ASCII letter
SENT_PATH = "/in%20box%7F%C3%BC"


@pytest.fixture
def conn(webhook_db: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(webhook_db, autocommit=True) as connection:
        yield connection


def _endpoint(receiver: WebhookReceiver, secret: str) -> str:
    """An endpoint of ``receiver`` whose name is SENT_PATH: only a request to the encoded path reaches it."""
    url = receiver.endpoint(SENT_PATH.lstrip("/"), secret)
    return url[:-len(SENT_PATH)]  # the receiver's base URL


def test_add_and_update_store_the_encoded_url_and_refuse_what_cannot_be_encoded(
        webhook_db: str, conn: psycopg.Connection) -> None:
    tenant = new_tenant(conn)
    asked: list[str] = []

    def resolver(host: str, port: int, **_: Any) -> list[Any]:
        asked.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    idn = {"xn--bcher-kva.example"}  # allowed to resolve to 127.0.0.1 here, as a receiver on this host
    added = subscriptions.add(conn, tenant, "  http://Bücher.example:9" + RAW_PATH + "?q=ä b ",
                              allow_http_hosts=idn, resolver=resolver)
    stored = subscriptions.show(conn, added.id)["url"]
    assert stored == "http://xn--bcher-kva.example:9" + SENT_PATH + "?q=%C3%A4%20b"
    assert asked == ["xn--bcher-kva.example"]  # DNS is asked the IDNA form
    subscriptions.update(conn, added.id, url="http://127.0.0.1:9/a b", allow_http_hosts=LOCAL)
    assert subscriptions.show(conn, added.id)["url"] == "http://127.0.0.1:9/a%20b"

    with pytest.raises(InvalidSubscriptionError, match="no host name can have"):
        subscriptions.update(conn, added.id, url="http://exa mple.test/", allow_http_hosts=LOCAL)
    assert subscriptions.show(conn, added.id)["url"] == "http://127.0.0.1:9/a%20b"
    cli_env = {"DATABASE_URL": webhook_db, "WEBHOOK_ALLOW_HTTP_HOSTS": "127.0.0.1"}
    refused = run_cli("subscriptions", "add", "--tenant", tenant, "--url", "https://\u2603.example/", env=cli_env,
                      refuse_sockets=True)
    assert "not a valid internationalised domain name" in one_line_error(refused)
    assert [s["id"] for s in subscriptions.list_all(conn, tenant)] == [added.id]  # nothing written


def test_a_path_with_a_space_del_and_non_ascii_reaches_its_endpoint(
        env: dict[str, str], webhook_db: str, conn: psycopg.Connection, receiver: WebhookReceiver) -> None:
    tenant = new_tenant(conn)
    added = subscriptions.add(conn, tenant, "http://127.0.0.1:9/", allow_http_hosts=LOCAL)
    subscriptions.update(conn, added.id, url=_endpoint(receiver, added.secret) + RAW_PATH, allow_http_hosts=LOCAL)
    event_id = new_id("evt")
    with lambda_env(env) as (dispatch, _):
        assert dispatch(sqs_event([message(added.id, event_id, tenant_id=tenant)]),
                        context("dispatch")) == {"batchItemFailures": []}
    delivery_id = delivery_id_for(added.id, event_id)
    (request,) = receiver.history(delivery_id)
    assert request.endpoint == SENT_PATH.lstrip("/") and request.verified and request.accepted
    assert deliveries(webhook_db, [delivery_id])[delivery_id]["status"] == "succeeded"


def test_a_url_stored_raw_is_sent_encoded_or_fails_its_attempt_with_the_reason(
        env: dict[str, str], webhook_db: str, conn: psycopg.Connection, receiver: WebhookReceiver) -> None:
    tenant = new_tenant(conn)
    added = subscriptions.add(conn, tenant, "http://127.0.0.1:9/", allow_http_hosts=LOCAL)
    # As a row written before add/update encoded URLs (or by hand) holds it.
    conn.execute("UPDATE webhook_subscriptions SET url = %s WHERE id = %s",
                 (_endpoint(receiver, added.secret) + RAW_PATH, added.id))
    sent, unsendable = new_id("evt"), new_id("evt")
    with lambda_env(env) as (dispatch, _):
        dispatch(sqs_event([message(added.id, sent, tenant_id=tenant)]), context("dispatch"))
        conn.execute("UPDATE webhook_subscriptions SET url = 'http://127.0.0.1 x:9/in' WHERE id = %s", (added.id,))
        assert dispatch(sqs_event([message(added.id, unsendable, tenant_id=tenant)]),
                        context("dispatch")) == {"batchItemFailures": []}
    ok, failed = delivery_id_for(added.id, sent), delivery_id_for(added.id, unsendable)
    assert receiver.successes()[ok] == 1
    rows = deliveries(webhook_db, [ok, failed])
    assert rows[ok]["status"] == "succeeded"
    assert (rows[failed]["status"], rows[failed]["attempts"]) == ("retrying", 1)
    (attempt,) = attempts(webhook_db, [failed])
    assert attempt["recorded"] and attempt["outcome"] == "failed"
    assert attempt["error"].startswith("URL cannot be sent: host '127.0.0.1 x'")


@pytest.mark.parametrize(("host", "idna"), [("bücher.example", "xn--bcher-kva.example"),
                                            ("ドメイン.テスト", "xn--eckwd4c7c.xn--zckzah")])
def test_an_idn_host_goes_out_idna_encoded_in_the_host_header(receiver: WebhookReceiver, host: str,
                                                              idna: str) -> None:
    secret = new_secret()
    port = urlsplit(receiver.endpoint("idn", secret)).port

    def resolver(name: str, port: int, **_: Any) -> list[Any]:
        assert name == idna  # never the raw name
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    target = check_target(f"http://{host}:{port}/idn", {idna}, resolver)
    assert (target.host, target.host_header) == (idna, f"{idna}:{port}")
    body = '{"type":"t"}'
    result = WebhookSender(2, 5).post(target, body, signed_headers((secret,), "msg_idn", body, time.time()),
                                      Budget.after(10))
    assert result.ok, result.error
    (request,) = receiver.history("msg_idn")
    assert request.host == f"{idna}:{port}"
