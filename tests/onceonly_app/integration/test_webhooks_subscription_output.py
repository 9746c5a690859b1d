"""What `subscriptions add/update` store, print and record (docs/webhooks.md,
"Managing subscriptions"), on a real PostgreSQL: --json prints the row as
stored, not the input; an update that changes nothing writes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from onceonly_app.webhooks import subscriptions
from tests.support.cli.cli_support import run_cli
from tests.support.delivery.held_deliveries import LOCAL, new_tenant


@pytest.fixture
def conn(webhook_db: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(webhook_db, autocommit=True) as connection:
        yield connection


@pytest.fixture
def tenant(conn: psycopg.Connection) -> str:
    return new_tenant(conn)


def _audit(conn: psycopg.Connection, webhook_id: str) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT action, detail FROM webhook_subscription_audit WHERE webhook_id = %s "
                           "ORDER BY id", (webhook_id,)).fetchall()


def test_add_and_update_json_print_the_stored_row_not_the_input(
        webhook_db: str, tenant: str, conn: psycopg.Connection) -> None:
    cli_env = {"DATABASE_URL": webhook_db, "WEBHOOK_ALLOW_HTTP_HOSTS": "127.0.0.1"}
    added = run_cli("subscriptions", "add", "--tenant", tenant, "--url", "  http://127.0.0.1:9/in  ",
                    "--event-types", "invoice.paid,invoice.overdue,invoice.paid", "--json", env=cli_env)
    assert added.returncode == 0, added.stderr
    printed = json.loads(added.stdout)
    stored = subscriptions.show(conn, printed["id"])
    assert printed["url"] == stored["url"] == "http://127.0.0.1:9/in"
    assert printed["event_types"] == stored["event_types"] == ["invoice.overdue", "invoice.paid"]
    assert (printed["max_in_flight"], printed["rate_per_second"]) == (stored["max_in_flight"],
                                                                      stored["rate_per_second"]) == (10, 50.0)
    assert printed["tenant_id"] == tenant and printed["enabled"] is True and printed["secret"].startswith("whsec_")

    updated = run_cli("subscriptions", "update", printed["id"], "--rate", "7", "--json", env=cli_env)
    assert updated.returncode == 0, updated.stderr
    after = json.loads(updated.stdout)
    assert after["rate_per_second"] == 7.0 and after["url"] == "http://127.0.0.1:9/in"
    assert after["changed"] == {"rate_per_second": {"from": 50.0, "to": 7.0}}
    assert "secret" not in after


def test_an_update_that_changes_nothing_writes_nothing(tenant: str, conn: psycopg.Connection) -> None:
    added = subscriptions.add(conn, tenant, "http://127.0.0.1:9/same", ["invoice.paid"], max_in_flight=3,
                              rate_per_second=4, allow_http_hosts=LOCAL)
    before = subscriptions.show(conn, added.id)
    assert subscriptions.update(conn, added.id, url=" http://127.0.0.1:9/same ", event_types=["invoice.paid"],
                                max_in_flight=3, rate_per_second=4.0, allow_http_hosts=LOCAL) == {}
    assert [row["action"] for row in _audit(conn, added.id)] == ["add"]
    assert subscriptions.show(conn, added.id)["updated_at"] == before["updated_at"]
    # A real change still is one, recorded once.
    assert subscriptions.update(conn, added.id, max_in_flight=4) == {"max_in_flight": {"from": 3, "to": 4}}
    assert [row["action"] for row in _audit(conn, added.id)] == ["add", "update"]
