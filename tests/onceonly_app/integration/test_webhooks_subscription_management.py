"""Managing subscriptions without SQL (docs/webhooks.md, "Managing
subscriptions"), on a real PostgreSQL: every change validated (tenant, SSRF
guard, event types) and recorded in the audit, the secret shown once, and the
fan-out honouring each subscription's event-type filter for every event type."""

from __future__ import annotations

import getpass
import json
import os
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool
from standardwebhooks import Webhook

import onceonly
from onceonly_app.billing import overdue
from onceonly_app.events import outbox
from onceonly_app.events.types import EVENT_TYPES, invoice_event_id
from onceonly_app.webhooks import subscriptions
from onceonly_app.webhooks.deliveries import delivery_id_for
from onceonly_app.webhooks.subscriptions import InvalidSubscriptionError
from onceonly_cli.testing.receiver import Reply, WebhookReceiver
from tests.support.cli.cli_support import one_line_error, run_cli
from tests.support.delivery.webhooks import context, lambda_env, message, new_id, sqs_event, subscription
from tests.support.jobs import jobs_data
from tests.support.jobs.jobs_inprocess import run_tick

LOCAL = frozenset({"127.0.0.1"})  # the receiver's host, allowed plain http as the sender's config allows


@pytest.fixture
def conn(webhook_db: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(webhook_db, autocommit=True) as connection:
        yield connection


@pytest.fixture
def tenant(conn: psycopg.Connection) -> str:
    """A tenant billing knows (its settings row)."""
    name = new_id("tenant")
    conn.execute("INSERT INTO billing_tenants (tenant_id) VALUES (%s)", (name,))
    return name


def _audit(conn: psycopg.Connection, webhook_id: str) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT action, actor, detail FROM webhook_subscription_audit WHERE webhook_id = %s "
                           "ORDER BY id", (webhook_id,)).fetchall()


def _count(conn: psycopg.Connection, query: str, *params: Any) -> int:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return int(row[0])


def _no_connection(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError(f"a connection was attempted: {args}")


@pytest.fixture
def no_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Python socket may connect during the test (the database is libpq's, in C)."""
    monkeypatch.setattr(socket, "create_connection", _no_connection)
    monkeypatch.setattr(socket.socket, "connect", _no_connection)


# -- validation ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("url", [
    "https://10.0.0.1/hooks", "https://169.254.169.254/latest/meta-data", "https://[::1]/", "http://127.0.0.1:1/",
    "https://[::ffff:192.168.0.1]/", "ftp://example.test/", "https://user:pw@127.0.0.1/", "not a url",
])
def test_a_url_the_ssrf_guard_refuses_is_refused_at_creation_before_any_connection(
        conn: psycopg.Connection, tenant: str, url: str, no_sockets: None) -> None:
    before = _count(conn, "SELECT count(*) FROM webhook_subscriptions WHERE tenant_id = %s", tenant)
    with pytest.raises(InvalidSubscriptionError, match="URL refused"):
        subscriptions.add(conn, tenant, url)
    assert _count(conn, "SELECT count(*) FROM webhook_subscriptions WHERE tenant_id = %s", tenant) == before == 0


def test_a_name_resolving_to_an_internal_address_is_refused_and_one_to_an_allowed_host_passes(
        conn: psycopg.Connection, tenant: str) -> None:
    asked: list[str] = []

    def resolver(host: str, port: int, **_: Any) -> list[Any]:
        asked.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    with pytest.raises(InvalidSubscriptionError, match="loopback"):
        subscriptions.add(conn, tenant, "https://hooks.merchant.test/in", resolver=resolver)
    added = subscriptions.add(conn, tenant, "http://127.0.0.1:9/in", allow_http_hosts=LOCAL)
    assert asked == ["hooks.merchant.test"] and subscription(conn.info.dsn, added.id)["url"] == "http://127.0.0.1:9/in"


def test_an_unknown_tenant_or_event_type_and_a_bad_id_are_refused_and_nothing_is_written(
        conn: psycopg.Connection, tenant: str, no_sockets: None) -> None:
    # validation only: nothing here may open a socket (one update names a private address)
    url = "http://127.0.0.1:9/"
    unknown_tenant = new_id("no-such-tenant")
    with pytest.raises(InvalidSubscriptionError, match="unknown tenant"):
        subscriptions.add(conn, unknown_tenant, url, allow_http_hosts=LOCAL)
    registered = subscriptions.add(conn, new_id("fresh-tenant"), url, new_tenant=True, allow_http_hosts=LOCAL)
    assert _audit(conn, registered.id)[0]["detail"]["new_tenant"] is True  # registered, then subscribed
    with pytest.raises(InvalidSubscriptionError, match="unknown event type"):
        subscriptions.add(conn, tenant, url, ["invoice.paid", "invoice.refunded"], allow_http_hosts=LOCAL)
    with pytest.raises(InvalidSubscriptionError, match="at least one"):
        subscriptions.add(conn, tenant, url, [], allow_http_hosts=LOCAL)
    for bad_id in ("", "has space", "x" * 129, "-dash-first"):
        with pytest.raises(InvalidSubscriptionError, match="subscription id"):
            subscriptions.add(conn, tenant, url, subscription_id=bad_id, allow_http_hosts=LOCAL)
    taken = subscriptions.add(conn, tenant, url, allow_http_hosts=LOCAL)
    with pytest.raises(InvalidSubscriptionError, match="taken"):
        subscriptions.add(conn, tenant, url, subscription_id=taken.id, allow_http_hosts=LOCAL)
    assert _count(conn, "SELECT count(*) FROM webhook_subscriptions WHERE tenant_id = ANY(%s)",
                  [tenant, unknown_tenant]) == 1
    assert [row["action"] for row in _audit(conn, taken.id)] == ["add"]
    with pytest.raises(InvalidSubscriptionError, match="URL refused"):
        subscriptions.update(conn, taken.id, url="https://10.1.2.3/", allow_http_hosts=LOCAL)
    with pytest.raises(InvalidSubscriptionError, match="unknown event type"):
        subscriptions.update(conn, taken.id, event_types=["nope"])
    with pytest.raises(InvalidSubscriptionError, match="nothing to change"):
        subscriptions.update(conn, taken.id)
    with pytest.raises(subscriptions.UnknownSubscriptionError):
        subscriptions.update(conn, new_id("no-such"), event_types=["invoice.paid"])
    assert subscription(conn.info.dsn, taken.id)["url"] == url
    assert [row["action"] for row in _audit(conn, taken.id)] == ["add"]


# -- the secret and the audit ----------------------------------------------------------------------------

def test_add_returns_a_standard_webhooks_secret_once_and_every_change_is_audited(
        conn: psycopg.Connection, pg_store: onceonly.Store, tenant: str) -> None:
    added = subscriptions.add(conn, tenant, "http://127.0.0.1:9/a", ["invoice.paid"], actor="alice",
                              allow_http_hosts=LOCAL)
    assert added.secret.startswith("whsec_") and subscription(conn.info.dsn, added.id)["secret"] == added.secret
    signed = Webhook(added.secret).sign("msg_1", datetime.now(tz=UTC), "{}")
    assert signed.startswith("v1,")  # standardwebhooks takes it as a signing key
    shown = subscriptions.show(conn, added.id)
    assert added.secret not in json.dumps(shown, default=str)  # show never carries a secret
    assert all(added.secret not in json.dumps(row, default=str) for row in subscriptions.list_all(conn, tenant))

    assert subscriptions.update(conn, added.id, all_event_types=True, actor="bob") == {
        "event_types": {"from": ["invoice.paid"], "to": None}}
    rotated = subscriptions.rotate_secret(conn, added.id, overlap=60, actor="carol")
    assert rotated.startswith("whsec_") and rotated != added.secret
    subscriptions.disable(conn, added.id, "maintenance", actor="dave")
    subscriptions.enable(conn, pg_store.queue(new_id("q")), added.id, actor="erin")
    subscriptions.delete(conn, added.id, actor="frank")
    log = _audit(conn, added.id)
    assert [(row["action"], row["actor"]) for row in log] == [
        ("add", "alice"), ("update", "bob"), ("rotate-secret", "carol"), ("disable", "dave"),
        ("enable", "erin"), ("delete", "frank")]
    assert log[0]["detail"] == {"tenant_id": tenant, "url": "http://127.0.0.1:9/a", "event_types": ["invoice.paid"],
                                "max_in_flight": 10, "rate_per_second": 50.0}
    assert log[3]["detail"]["reason"] == "maintenance"
    assert not any(secret in json.dumps(log) for secret in (added.secret, rotated))
    with pytest.raises(subscriptions.SubscriptionDeletedError):
        subscriptions.rotate_secret(conn, added.id, actor="frank")
    assert [row["action"] for row in subscriptions.show(conn, added.id)["changes"]][0] == "delete"


def test_a_410s_disable_is_audited_as_the_endpoints(
        env: dict[str, str], webhook_db: str, conn: psycopg.Connection, receiver: WebhookReceiver,
        tenant: str) -> None:
    added = subscriptions.add(conn, tenant, "http://127.0.0.1:9/", allow_http_hosts=LOCAL)
    url = receiver.endpoint(new_id("ep"), added.secret)
    subscriptions.update(conn, added.id, url=url, allow_http_hosts=LOCAL)
    event_id = new_id("evt")
    receiver.script(delivery_id_for(added.id, event_id), [Reply(410)])
    with lambda_env(env) as (dispatch, _retry):
        dispatch(sqs_event([message(added.id, event_id, tenant_id=tenant)]), context("dispatch"))
    log = _audit(conn, added.id)
    assert [(row["action"], row["actor"]) for row in log] == [
        ("add", "onceonly-app"), ("update", "onceonly-app"), ("disable", "endpoint")]
    assert log[-1]["detail"]["url"] == url


# -- the command -----------------------------------------------------------------------------------------

def test_the_command_adds_lists_shows_updates_rotates_with_json_and_records_the_os_user(
        webhook_db: str, tenant: str, conn: psycopg.Connection) -> None:
    cli_env = {"DATABASE_URL": webhook_db, "WEBHOOK_ALLOW_HTTP_HOSTS": "127.0.0.1"}
    added = run_cli("subscriptions", "add", "--tenant", tenant, "--url", "http://127.0.0.1:9/cli",
                    "--event-types", "invoice.paid", "--max-in-flight", "3", "--rate", "7.5", "--json", env=cli_env)
    assert added.returncode == 0, added.stderr
    made = json.loads(added.stdout)
    assert made["secret"].startswith("whsec_") and made["event_types"] == ["invoice.paid"]
    webhook_id = made["id"]

    listed = run_cli("subscriptions", "list", "--tenant", tenant, "--json", env=cli_env)
    assert listed.returncode == 0, listed.stderr
    assert [s["id"] for s in json.loads(listed.stdout)["subscriptions"]] == [webhook_id]
    assert made["secret"] not in listed.stdout
    shown_json = json.loads(run_cli("subscriptions", "show", webhook_id, "--json", env=cli_env).stdout)
    assert (shown_json["max_in_flight"], shown_json["rate_per_second"]) == (3, 7.5)
    assert [c["action"] for c in shown_json["changes"]] == ["add"]
    shown = run_cli("subscriptions", "show", webhook_id, env=cli_env)  # the terminal table
    assert shown.returncode == 0 and "invoice.paid" in shown.stdout and made["secret"] not in shown.stdout

    updated = run_cli("subscriptions", "update", webhook_id, "--all-event-types", "--actor", "ops-bot", "--json",
                      env=cli_env)
    assert updated.returncode == 0, updated.stderr
    assert json.loads(updated.stdout)["changed"] == {"event_types": {"from": ["invoice.paid"], "to": None}}
    rotated = run_cli("subscriptions", "rotate-secret", webhook_id, "--overlap", "60", "--json", env=cli_env)
    assert rotated.returncode == 0 and json.loads(rotated.stdout)["secret"].startswith("whsec_")
    assert [(r["action"], r["actor"]) for r in _audit(conn, webhook_id)] == [
        ("add", getpass.getuser()), ("update", "ops-bot"), ("rotate-secret", getpass.getuser())]

    # refused before any connection: the command runs with every Python socket connect refused
    refused = run_cli("subscriptions", "add", "--tenant", tenant, "--url", "https://10.0.0.1/", env=cli_env,
                      refuse_sockets=True)
    assert refused.returncode == 1 and "private" in one_line_error(refused)
    no_tenant = run_cli("subscriptions", "add", "--tenant", new_id("ghost"), "--url", "http://127.0.0.1:9/",
                        env=cli_env)
    assert no_tenant.returncode == 1 and "unknown tenant" in one_line_error(no_tenant)
    bad_type = run_cli("subscriptions", "update", webhook_id, "--event-types", "invoice.nope", env=cli_env)
    assert bad_type.returncode == 1 and "unknown event type" in one_line_error(bad_type)
    assert len(_audit(conn, webhook_id)) == 3  # the refusals wrote nothing


# -- event-type filters in the fan-out -------------------------------------------------------------------

def _outbox(conn: psycopg.Connection, event_id: str) -> set[str]:
    rows = conn.execute("SELECT webhook_id FROM webhook_outbox WHERE event_id = %s", (event_id,)).fetchall()
    return {row[0] for row in rows}


@pytest.mark.parametrize("event_type", EVENT_TYPES)
def test_the_fan_out_writes_an_event_only_for_the_subscriptions_whose_filter_wants_its_type(
        conn: psycopg.Connection, tenant: str, event_type: str) -> None:
    others = [t for t in EVENT_TYPES if t != event_type]
    unfiltered = subscriptions.add(conn, tenant, "http://127.0.0.1:9/", allow_http_hosts=LOCAL).id
    wants_it = subscriptions.add(conn, tenant, "http://127.0.0.1:9/", [event_type], allow_http_hosts=LOCAL).id
    wants_others = subscriptions.add(conn, tenant, "http://127.0.0.1:9/", others, allow_http_hosts=LOCAL).id
    event_id = new_id("evt")
    with conn.transaction():
        outbox.fan_out(conn, event_id, event_type, tenant, {"n": 1})
    assert _outbox(conn, event_id) == {unfiltered, wants_it}
    assert wants_others not in _outbox(conn, event_id)

    # A filter change applies to the events after it, not to those fanned out before.
    subscriptions.update(conn, wants_it, event_types=others)
    subscriptions.update(conn, wants_others, all_event_types=True)
    later = new_id("evt")
    with conn.transaction():
        outbox.fan_out(conn, later, event_type, tenant, {"n": 2})
    assert _outbox(conn, later) == {unfiltered, wants_others}
    assert _outbox(conn, event_id) == {unfiltered, wants_it}  # the earlier event's rows stay


def test_the_overdue_job_emits_invoice_overdue_only_to_subscriptions_that_want_it(
        conn: psycopg.Connection, webhook_db: str, tenant: str, pg_store: onceonly.Store) -> None:
    wants = subscriptions.add(conn, tenant, "http://127.0.0.1:9/", ["invoice.overdue"], allow_http_hosts=LOCAL).id
    paid_only = subscriptions.add(conn, tenant, "http://127.0.0.1:9/", ["invoice.paid"], allow_http_hosts=LOCAL).id
    invoice = jobs_data.add_invoice(conn, tenant, due_at="2026-11-01T00:00:00Z")
    job = new_id("overdue")
    jobs_data.ledger_read(conn, job, tenant=tenant)  # the watcher has read the whole ledger: nothing waits
    with ConnectionPool(webhook_db, min_size=0, max_size=1, open=True) as pool:
        run_tick(pg_store, job, "2026-11-29T02:00:00Z", lambda t: overdue.run(pool, t, watcher=job, tenant=tenant))
    rows = conn.execute("SELECT webhook_id, event_id, event_type, payload FROM webhook_outbox WHERE tenant_id = %s",
                        (tenant,)).fetchall()
    assert [(r[0], r[1], r[2]) for r in rows] == [
        (wants, invoice_event_id("invoice.overdue", invoice), "invoice.overdue")]
    assert rows[0][3]["invoice_id"] == invoice and rows[0][3]["due_on"] == "2026-11-01"
    assert paid_only not in {r[0] for r in rows}


def test_limits_are_validated_and_their_changes_audited(conn: psycopg.Connection, tenant: str) -> None:
    for bad in ({"max_in_flight": 0}, {"max_in_flight": 1001}, {"rate_per_second": 0.0},
                {"rate_per_second": -1.0}, {"rate_per_second": float("inf")}, {"rate_per_second": float("nan")}):
        with pytest.raises(InvalidSubscriptionError, match="in flight|rate"):
            subscriptions.add(conn, tenant, "http://127.0.0.1:9/", allow_http_hosts=LOCAL, **bad)  # type: ignore[arg-type]
    assert _count(conn, "SELECT count(*) FROM webhook_subscriptions WHERE tenant_id = %s", tenant) == 0
    added = subscriptions.add(conn, tenant, "http://127.0.0.1:9/", allow_http_hosts=LOCAL)
    shown = subscriptions.show(conn, added.id)
    assert (shown["max_in_flight"], shown["rate_per_second"]) == (10, 50.0)  # the defaults
    assert subscriptions.update(conn, added.id, max_in_flight=2, rate_per_second=5) == {
        "max_in_flight": {"from": 10, "to": 2}, "rate_per_second": {"from": 50.0, "to": 5.0}}
    shown = subscriptions.show(conn, added.id)
    assert (shown["max_in_flight"], shown["rate_per_second"]) == (2, 5.0)
    assert _audit(conn, added.id)[-1]["detail"] == {"max_in_flight": {"from": 10, "to": 2},
                                                    "rate_per_second": {"from": 50.0, "to": 5.0}}


# -- endpoint health in `onceonly status` ----------------------------------------------------------------

def test_status_shows_each_subscriptions_success_rate_last_error_backlog_and_disabled_reason(
        env: dict[str, str], webhook_db: str, conn: psycopg.Connection, receiver: WebhookReceiver,
        tenant: str) -> None:
    added = subscriptions.add(conn, tenant, "http://127.0.0.1:9/", allow_http_hosts=LOCAL)
    subscriptions.update(conn, added.id, url=receiver.endpoint(new_id("ep"), added.secret), allow_http_hosts=LOCAL)
    events = [new_id("evt") for _ in range(3)]
    receiver.script(delivery_id_for(added.id, events[0]), [Reply(503)])
    with lambda_env(env) as (dispatch, _retry):
        dispatch(sqs_event([message(added.id, e, tenant_id=tenant) for e in events]), context("dispatch"))
    subscriptions.disable(conn, added.id, "merchant migrating")

    result = run_cli("status", "--json", "--database", webhook_db, "--store", env["ONCEONLY_STORE_URL"])
    assert result.returncode == 0, result.stderr
    (health,) = [s for s in json.loads(result.stdout)["subscriptions"] if s["id"] == added.id]
    assert health["success_rate"] == {"hour": round(2 / 3, 4), "day": round(2 / 3, 4)}
    assert health["attempts"] == {"hour": 3, "day": 3}
    assert "503" in health["last_error"] and health["last_error_at"] is not None
    assert health["deliveries"] == {"pending": 0, "retrying": 1, "dead": 0, "held": 0, "aborted": 0}
    assert (health["enabled"], health["disabled_reason"]) == (False, "merchant migrating")
    table = run_cli("status", "--database", webhook_db, "--store", env["ONCEONLY_STORE_URL"],
                    env={**os.environ, "COLUMNS": "250", "DATABASE_URL": webhook_db})
    assert table.returncode == 0 and "merchant migrating" in table.stdout and "67% of 3" in table.stdout
