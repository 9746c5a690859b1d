"""The simulation's judges of billing's promises hold on a good state and break
on a bad one: due days counted from the issue day, due dates kept through a
zone change, and merchants told of unmatched and overpaid payments exactly
once per subscription whose filter takes the event."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

from onceonly_app.events.types import payment_event_id
from onceonly_cli.simulate.billing_checks import judge_due_from_issue, judge_promised_dates
from onceonly_cli.simulate.payment_checks import PaymentFacts, judge_merchant_events, names

TICKS = [datetime(2040, 3, 14, 0, 30, tzinfo=UTC), datetime(2040, 3, 15, 0, 30, tzinfo=UTC)]


def generated(period: str, due_on: date, zone: str = "UTC", due_days: int = 14) -> dict[str, Any]:
    return {"id": f"inv_{period}", "schedule_id": "sch_1", "period_key": period, "due_on": due_on,
            "due_time_zone": zone, "due_days": due_days}


def test_invoices_due_from_their_issue_day_hold() -> None:
    invoices = [generated("2040-03-10", date(2040, 3, 28)),  # caught up at the first tick (the 14th)
                generated("2040-03-15", date(2040, 3, 29)),  # on time at the second
                generated("2040-03-09", date(2040, 3, 27), zone="Pacific/Honolulu")]  # the 13th there
    invariant = judge_due_from_issue(invoices, TICKS)
    assert invariant.ok, invariant.detail


def test_an_invoice_due_from_its_period_start_though_issued_late_breaks_it() -> None:
    invariant = judge_due_from_issue([generated("2040-03-10", date(2040, 3, 24))], TICKS)
    assert not invariant.ok and "inv_2040-03-10" in invariant.detail


def test_no_late_issue_at_all_judges_nothing() -> None:
    assert not judge_due_from_issue([generated("2040-03-15", date(2040, 3, 29))], TICKS).ok


def test_due_dates_kept_hold_and_a_moved_one_breaks_it() -> None:
    promised = {"inv_1": date(2040, 3, 14), "inv_2": date(2040, 3, 15)}
    kept = [{"id": "inv_1", "due_on": date(2040, 3, 14)}, {"id": "inv_2", "due_on": date(2040, 3, 15)}]
    assert judge_promised_dates(kept, promised).ok
    moved = judge_promised_dates([kept[0], {"id": "inv_2", "due_on": date(2040, 3, 14)}], promised)
    assert not moved.ok and "inv_2" in moved.detail


def test_memos_name_invoices_trimmed_and_case_folded() -> None:
    assert names(" INV_2CE89696 ", "inv_2ce89696") and not names("inv_2ce8969", "inv_2ce89696")


SUBSCRIPTIONS = [{"id": "wh_all", "tenant_id": "t1", "event_types": None},
                 {"id": "wh_paid", "tenant_id": "t1", "event_types": ["invoice.paid"]},
                 {"id": "wh_other", "tenant_id": "t2", "event_types": None}]
FACTS = PaymentFacts(rows={"p1": {"payment_id": "p1", "tenant_id": "t1", "outcome": "unmatched"},
                           "p2": {"payment_id": "p2", "tenant_id": "t1", "outcome": "overpaid"}},
                     invoices={}, accounts={})


def told(event_type: str, payment: str, webhook: str) -> dict[str, Any]:
    return {"event_id": payment_event_id(event_type, payment), "webhook_id": webhook, "event_type": event_type,
            "payload": {}}


def test_each_unmatched_and_overpaid_payment_told_once_to_the_subscriptions_that_take_it() -> None:
    events = [told("payment.unmatched", "p1", "wh_all"), told("payment.overpaid", "p2", "wh_all"),
              {"event_id": "evt_x", "webhook_id": "wh_paid", "event_type": "invoice.paid",
               "payload": {"invoice_id": "inv_over", "overpaid": True, "amount_remaining": 0}}]
    invariant = judge_merchant_events(events, SUBSCRIPTIONS, FACTS, ["inv_over"])
    assert invariant.ok, invariant.detail


def test_an_event_missing_twice_to_a_filtered_or_another_tenants_subscription_breaks_it() -> None:
    good = [told("payment.unmatched", "p1", "wh_all"), told("payment.overpaid", "p2", "wh_all")]
    for bad in ([good[0]],  # the overpayment never told
                [*good, good[0]],  # told twice
                [*good, told("payment.unmatched", "p1", "wh_paid")],  # its filter leaves the type out
                [*good, told("payment.unmatched", "p1", "wh_other")]):  # another tenant's
        assert not judge_merchant_events(bad, SUBSCRIPTIONS, FACTS, []).ok


def test_an_overpaid_invoices_paid_event_that_does_not_say_so_breaks_it() -> None:
    events = [told("payment.unmatched", "p1", "wh_all"), told("payment.overpaid", "p2", "wh_all"),
              {"event_id": "evt_x", "webhook_id": "wh_paid", "event_type": "invoice.paid",
               "payload": {"invoice_id": "inv_over", "overpaid": False, "amount_remaining": 0}}]
    assert not judge_merchant_events(events, SUBSCRIPTIONS, FACTS, ["inv_over"]).ok
