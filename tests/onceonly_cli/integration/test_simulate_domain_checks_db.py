"""The domain invariants of `onceonly simulate` read the right rows: a migrated
database of the test's own on the real PostgreSQL, a good state that holds,
then one bad row of the kind each invariant exists for, which breaks it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest

from onceonly_app.db.migrate import migrate
from onceonly_cli.local.scratch import scratch_database
from onceonly_cli.simulate.billing_checks import billing_invariants
from onceonly_cli.simulate.payment_checks import SeededPayment, payment_invariants
from onceonly_cli.simulate.recovery_load import RecoveryScenario
from onceonly_cli.simulate.webhook_checks import webhook_invariants

LAST_TICK = datetime(2040, 3, 15, 2, 0, tzinfo=UTC)  # 11:00 on the 15th in Tokyo
ISSUER = "G" + "A" * 55
ACCOUNT = "G" + "C" * 55

INVOICE = """INSERT INTO invoices (id, tenant_id, customer_email, amount_cents, currency, status, due_at, schedule_id,
                                   period_key) VALUES (%s, %s, 'c@example.com', 300, %s, %s, %s, %s, %s)"""
HISTORY = "INSERT INTO invoice_status_history (invoice_id, from_status, to_status, changed_at) VALUES (%s, %s, %s, %s)"


@pytest.fixture
def conn(postgres_url: str) -> Iterator[psycopg.Connection[Any]]:
    with scratch_database(postgres_url, "simchecks") as url:
        migrate(url)
        with psycopg.connect(url, autocommit=True) as connection:
            yield connection


def by_name(invariants: list[Any]) -> dict[str, Any]:
    return {i.name: i for i in invariants}


def invoice(conn: psycopg.Connection[Any], iid: str, tenant: str, status: str, due_at: datetime, *,
            currency: str = "USD", schedule: str | None = None, period: str | None = None) -> None:
    conn.execute(INVOICE, (iid, tenant, currency, status, due_at, schedule, period))


def test_billing_invariants_read_due_days_pauses_and_emails(conn: psycopg.Connection[Any]) -> None:
    conn.execute("INSERT INTO billing_tenants (tenant_id, time_zone) VALUES ('tokyo', 'Asia/Tokyo')")
    # Due on the 14th in Tokyo, moved by the tick at 11:00 on the 15th there: right.
    invoice(conn, "inv_ok", "tokyo", "overdue", datetime(2040, 3, 13, 15, 30, tzinfo=UTC))
    conn.execute(HISTORY, ("inv_ok", "open", "overdue", LAST_TICK))
    conn.execute("""INSERT INTO billing_schedules (id, tenant_id, customer_email, amount_cents, cadence, anchor)
                    VALUES ('sch', 'tokyo', 's@example.com', 500, 'daily', '2040-03-01')""")
    conn.execute("INSERT INTO billing_schedule_pauses (schedule_id, paused_on, resumed_on) "
                 "VALUES ('sch', '2040-03-02', '2040-03-04')")
    invoice(conn, "inv_p1", "tokyo", "open", LAST_TICK, schedule="sch", period="2040-03-01")
    invoice(conn, "inv_paid", "tokyo", "paid", LAST_TICK)
    conn.execute(HISTORY, ("inv_paid", "overdue", "paid", datetime(2040, 3, 15, 9, tzinfo=UTC)))
    conn.execute("""INSERT INTO notifications (notification_key, tenant_id, invoice_id, kind, recipient, subject,
                                               body_text, status, sent_at)
                    VALUES ('k1', 'tokyo', 'inv_paid', 'invoice.overdue', 'c@example.com', 's', 'b', 'cancelled',
                            NULL)""")
    assert all(i.ok for i in billing_invariants(conn, LAST_TICK, 0, {}))

    # Due on the 15th in Tokyo (15:30 UTC on the 14th): moved although that day has not ended.
    invoice(conn, "inv_early", "tokyo", "overdue", datetime(2040, 3, 14, 15, 30, tzinfo=UTC))
    conn.execute(HISTORY, ("inv_early", "open", "overdue", LAST_TICK))
    invoice(conn, "inv_p3", "tokyo", "open", LAST_TICK, schedule="sch", period="2040-03-03")
    conn.execute("""INSERT INTO notifications (notification_key, tenant_id, invoice_id, kind, recipient, subject,
                                               body_text, status, sent_at)
                    VALUES ('k2', 'tokyo', 'inv_paid', 'invoice.overdue', 'c@example.com', 's', 'b', 'sent',
                            '2040-03-15T10:00:00Z')""")
    judged = by_name(billing_invariants(conn, LAST_TICK, 0, {}))
    assert "inv_early" in judged["no overdue before the due day ended"].detail
    assert "2040-03-03" in judged["paused periods not billed"].detail
    assert "sent 2040-03-15 10:00:00+00:00" in judged["no overdue e-mail for a paid invoice"].detail
    assert not any(i.ok for i in judged.values())


def test_the_scenario_invariants_read_status_overdue_moves_emails_and_late_payments(
        conn: psycopg.Connection[Any]) -> None:
    for iid in ("inv_exact", "inv_on_time"):
        invoice(conn, iid, "t1", "paid", LAST_TICK)
    conn.execute("INSERT INTO invoices (id, tenant_id, customer_email, amount_cents, currency, due_at)"
                 " VALUES ('inv_zero', 't1', 'c@example.com', 0, 'USD', %s)", (LAST_TICK,))  # settled when issued
    scenarios = {"sub-cent": ["inv_exact"], "zero": ["inv_zero"], "outage": ["inv_on_time"]}
    names = ["sub-cent parts pay exactly", "zero invoice never overdue", "no dunning of an on-time payment seen late"]
    judged = by_name(billing_invariants(conn, LAST_TICK, 0, scenarios))
    assert all(judged[n].ok for n in names)

    conn.execute("UPDATE invoices SET status = 'open' WHERE id = 'inv_exact'")  # a cent short, by rounding
    conn.execute(HISTORY, ("inv_zero", "open", "overdue", LAST_TICK))
    conn.execute(PAYMENT, ("p_late", "tx_late", "1", "inv_on_time", "USD", ISSUER, "inv_on_time", ACCOUNT,
                           "settled", None))
    conn.execute("UPDATE payments SET late = true WHERE payment_id = 'p_late'")
    conn.execute("""INSERT INTO notifications (notification_key, tenant_id, invoice_id, kind, recipient, subject,
                                               body_text)
                    VALUES ('k3', 't1', 'inv_on_time', 'invoice.overdue', 'c@example.com', 's', 'b')""")
    judged = by_name(billing_invariants(conn, LAST_TICK, 0, scenarios))
    assert "inv_exact open" in judged[names[0]].detail
    assert "inv_zero paid, 1 overdue moves" in judged[names[1]].detail
    assert "1 overdue e-mails, 1 late payments" in judged[names[2]].detail
    assert not any(judged[n].ok for n in names)


PAYMENT = """INSERT INTO payments (payment_id, transaction_hash, paging_token, invoice_id, amount_cents, asset_code,
                                   asset_issuer, memo, poller, fence_token, tenant_id, to_account, outcome, reason)
             VALUES (%s, %s, %s, %s, 300, %s, %s, %s, 'payment-watcher', 1, 't1', %s, %s, %s)"""


def test_payment_invariants_read_the_payments_rows(conn: psycopg.Connection[Any]) -> None:
    conn.execute("INSERT INTO payment_accounts (account_id, tenant_id) VALUES (%s, 't1')", (ACCOUNT,))
    invoice(conn, "inv_a", "t1", "paid", LAST_TICK)
    conn.execute(HISTORY, ("inv_a", "open", "paid", LAST_TICK))
    invoice(conn, "inv_b", "t1", "open", LAST_TICK)
    for op in ("1", "2"):  # two operations of one transaction, the second completes inv_a
        conn.execute(PAYMENT, (op, "tx", op, "inv_a", "USD", ISSUER, "inv_a", ACCOUNT, "partial", None))
    conn.execute(PAYMENT, ("3", "tx3", "3", "inv_b", "EURC", ISSUER, "inv_b", ACCOUNT, "unmatched", "wrong_currency"))
    seeded = [SeededPayment("1", "tx", "inv_a", 150, "t1", None, 2, None),
              SeededPayment("2", "tx", "inv_a", 150, "t1", None, 2, "inv_a"),
              SeededPayment("3", "tx3", "inv_b", 300, "t1", "wrong_currency", 1, None)]
    accepted = {"USD": ("USD", ISSUER), "EUR": ("EURC", ISSUER)}
    baits = {"inv_b": "wrong_currency"}
    assert all(i.ok for i in payment_invariants(conn, seeded, baits, accepted))

    conn.execute("UPDATE payments SET outcome = 'settled', reason = NULL, invoice_id = 'inv_b' WHERE payment_id = '3'")
    conn.execute("DELETE FROM payments WHERE payment_id = '1'")
    judged = by_name(payment_invariants(conn, seeded, baits, accepted))
    assert "3 in EURC" in judged["payments credited to the right invoice and asset"].detail
    assert "inv_b credited by ['3']" in judged["unmatched payments recorded, never credited"].detail
    assert "rows for 1 of them" in judged["multi-operation payments: each operation once"].detail
    assert not any(i.ok for i in judged.values())


def test_the_tenant_invariant_reads_deliveries_and_the_outbox(conn: psycopg.Connection[Any]) -> None:
    for webhook_id, tenant in (("a", "t1"), ("b", "t2")):
        conn.execute("INSERT INTO webhook_subscriptions (id, tenant_id, url, secret) VALUES (%s, %s, 'u', 's')",
                     (webhook_id, tenant))
    delivery = """INSERT INTO webhook_deliveries (id, webhook_id, event_id, event_type, payload, status, tenant_id)
                  VALUES (%s, %s, %s, 'invoice.paid', '{}', %s, %s)"""
    conn.execute(delivery, ("d1", "a", "e1", "succeeded", "t1"))
    conn.execute(delivery, ("d2", "b", "e2", "dead", "t1"))  # misaddressed, refused
    load = SimpleNamespace(tenant_of={"a": "t1", "b": "t2"}, misaddressed={"d2"}, retry_after_of={}, trickled=set(),
                           scheduled={}, parked=set(), gone="", held=set(),
                           disabled_at=None, enabled_at=None, caps={}, fed_to={}, recovery=RecoveryScenario("x"))
    assert webhook_invariants(conn, [], load, 1.0, 1.0, 0)[0].ok

    conn.execute(delivery, ("d3", "b", "e3", "succeeded", "t1"))
    conn.execute("""INSERT INTO webhook_outbox (event_id, webhook_id, event_type, tenant_id, payload)
                    VALUES ('e4', 'a', 'invoice.paid', 't2', '{}')""")
    tenants = webhook_invariants(conn, [], load, 1.0, 1.0, 0)[0]
    assert tenants.name == "no cross-tenant delivery" and not tenants.ok
    assert "d3: t1's event, succeeded to t2's b" in tenants.detail and "outbox: t2's e4" in tenants.detail

