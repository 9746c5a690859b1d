"""The rate's floor (docs/webhooks.md, "Per-endpoint limits"): below one
request a minute a backlog would wait for ever, so add/update refuse it with
one line and write nothing, and the upgrade raises an existing lower rate to
the floor, recorded in the subscription's audit."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from onceonly_app.db.migrate import migrate
from onceonly_app.webhooks import subscriptions
from onceonly_app.webhooks.endpoint_limits import MIN_RATE
from onceonly_app.webhooks.subscriptions import InvalidSubscriptionError
from tests.support.cli.cli_support import one_line_error, run_cli
from tests.support.delivery.held_deliveries import LOCAL, new_tenant
from tests.support.delivery.webhook_fixtures import migrated_before


@pytest.fixture
def conn(webhook_db: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(webhook_db, autocommit=True) as connection:
        yield connection


def test_a_rate_below_the_floor_is_refused_in_one_line_and_nothing_is_written(
        webhook_db: str, conn: psycopg.Connection) -> None:
    tenant = new_tenant(conn)
    with pytest.raises(InvalidSubscriptionError, match="one request a minute"):
        subscriptions.add(conn, tenant, "http://127.0.0.1:9/", rate_per_second=1e-300, allow_http_hosts=LOCAL)
    assert subscriptions.list_all(conn, tenant) == []
    added = subscriptions.add(conn, tenant, "http://127.0.0.1:9/", rate_per_second=MIN_RATE, allow_http_hosts=LOCAL)
    assert subscriptions.show(conn, added.id)["rate_per_second"] == MIN_RATE  # the floor itself is allowed
    refused = run_cli("subscriptions", "update", added.id, "--rate", "0.001",
                      env={"DATABASE_URL": webhook_db, "WEBHOOK_ALLOW_HTTP_HOSTS": "127.0.0.1"})
    assert "one request a minute" in one_line_error(refused)
    assert subscriptions.show(conn, added.id)["rate_per_second"] == MIN_RATE
    with pytest.raises(psycopg.errors.CheckViolation):  # the table says the same
        conn.execute("UPDATE webhook_subscriptions SET rate_per_second = 1e-300 WHERE id = %s", (added.id,))


def test_the_upgrade_raises_a_rate_below_the_floor_and_records_it(postgres_server_url: str) -> None:
    with migrated_before(postgres_server_url, "0012") as url, psycopg.connect(url, autocommit=True) as conn:
        for webhook_id, rate in (("wh-crawl", 1e-300), ("wh-fine", 2.0)):
            conn.execute("INSERT INTO webhook_subscriptions (id, tenant_id, url, secret, rate_per_second) "
                         "VALUES (%s, 't1', 'https://x.test/', 'whsec_x', %s)", (webhook_id, rate))
        assert "0012_webhook_delivery_under_limits.sql" in migrate(url)
        rates = dict(conn.execute("SELECT id, rate_per_second FROM webhook_subscriptions").fetchall())
        assert rates == {"wh-crawl": MIN_RATE, "wh-fine": 2.0}
        audit = conn.execute("SELECT webhook_id, actor, detail FROM webhook_subscription_audit").fetchall()
        assert audit == [("wh-crawl", "migration 0012",
                          {"rate_per_second": {"from": 1e-300, "to": MIN_RATE}})]
