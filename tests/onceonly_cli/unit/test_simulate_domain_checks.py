"""The domain invariants of `onceonly simulate` hold on a good state and break
on a bad one: each judge is fed what the database and the receiver would hold
after a run, once right and then with one thing wrong."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, date, datetime
from typing import Any

import pytest

from onceonly_cli.simulate.billing_checks import (
    judge_due_days,
    judge_exactly_paid,
    judge_overdue_emails,
    judge_paid_during_outage,
    judge_pauses,
    judge_zero_invoices,
)
from onceonly_cli.simulate.payment_checks import (
    PaymentFacts,
    SeededPayment,
    judge_credited,
    judge_multi_operation,
    judge_unmatched,
)
from onceonly_cli.simulate.webhook_checks import (
    TRICKLE_GAP,
    judge_held,
    judge_retry_after,
    judge_tenants,
    judge_trickle,
)
from onceonly_cli.testing.receiver import ReceivedRequest

LAST_TICK = datetime(2040, 3, 15, 2, 0, tzinfo=UTC)  # the overdue job's last tick: 11:00 on the 15th in Tokyo
ISSUER, OTHER_ISSUER = "G" + "A" * 55, "G" + "B" * 55
ACCEPTED = {"USD": ("USD", ISSUER), "EUR": ("EURC", ISSUER)}


# -- due days, pauses, overdue e-mails ------------------------------------------------
def moved(due_at: datetime, zone: str) -> dict[str, Any]:
    return {"id": "inv_1", "due_at": due_at, "time_zone": zone, "status": "overdue"}


def test_an_invoice_moved_after_its_due_day_ended_in_its_zone_is_fine() -> None:
    # Due on the 14th in Tokyo (14:30 UTC on the 13th): that day ended at 15:00 UTC on the 14th.
    invariant = judge_due_days([moved(datetime(2040, 3, 13, 14, 30, tzinfo=UTC), "Asia/Tokyo")], LAST_TICK, 1)
    assert invariant.ok, invariant.detail


@pytest.mark.parametrize(("due_at", "zone"), [
    # Due on the 15th in Tokyo, early (15:30 UTC on the 14th): a due day judged in UTC ended already.
    (datetime(2040, 3, 14, 15, 30, tzinfo=UTC), "Asia/Tokyo"),
    # Due on the 14th in Honolulu (10:00 UTC on the 14th): the tick is 16:00 on the 14th there.
    (datetime(2040, 3, 14, 10, 0, tzinfo=UTC), "Pacific/Honolulu"),
    (datetime(2040, 3, 15, 0, 0, tzinfo=UTC), "UTC"),  # due on the tick's own day
])
def test_an_invoice_moved_before_its_due_day_ended_breaks_the_invariant(due_at: datetime, zone: str) -> None:
    invariant = judge_due_days([moved(due_at, zone)], LAST_TICK, 1)
    assert not invariant.ok and "inv_1" in invariant.detail and zone in invariant.detail


WINDOW = {"schedule_id": "sch_1", "paused_on": date(2040, 3, 10), "resumed_on": date(2040, 3, 12)}


def generated(period: str, schedule: str = "sch_1") -> dict[str, Any]:
    return {"id": f"inv_{period}", "schedule_id": schedule, "period_key": period}


def test_periods_outside_every_pause_window_may_be_billed() -> None:
    invoices = [generated("2040-03-09"), generated("2040-03-12"), generated("2040-03-10", schedule="sch_2")]
    assert judge_pauses(invoices, [WINDOW]).ok


@pytest.mark.parametrize(("period", "window"), [
    ("2040-03-10", WINDOW),  # the window's first day
    ("2040-03-11", WINDOW),
    ("2040-04-30", {**WINDOW, "resumed_on": None}),  # still paused
])
def test_a_billed_paused_period_breaks_the_invariant(period: str, window: dict[str, Any]) -> None:
    invariant = judge_pauses([generated(period)], [window])
    assert not invariant.ok and period in invariant.detail


def test_no_pause_window_at_all_is_a_scenario_not_exercised() -> None:
    assert not judge_pauses([generated("2040-03-10")], []).ok


PAID = datetime(2040, 3, 15, 9, 0, tzinfo=UTC)


def email(status: str, sent_at: datetime | None = None) -> dict[str, Any]:
    return {"id": 7, "invoice_id": "inv_1", "status": status, "sent_at": sent_at, "paid_at": PAID}


def test_overdue_emails_of_paid_invoices_cancelled_or_sent_before_the_payment_are_fine() -> None:
    invariant = judge_overdue_emails([email("cancelled"), email("sent", datetime(2040, 3, 15, 8, tzinfo=UTC))])
    assert invariant.ok and "1 cancelled" in invariant.detail


def test_an_overdue_email_sent_after_the_payment_breaks_the_invariant() -> None:
    invariant = judge_overdue_emails([email("sent", datetime(2040, 3, 15, 10, tzinfo=UTC))])
    assert not invariant.ok and "inv_1" in invariant.detail


# -- payments -------------------------------------------------------------------------
def scenario(iid: str = "inv_1", status: str = "paid", overdue_rows: int = 0, dunning: int = 0,
             late_payments: int = 0) -> dict[str, Any]:
    return {"id": iid, "status": status, "overdue_rows": overdue_rows, "dunning": dunning,
            "late_payments": late_payments}


SCENARIO_JUDGES = [judge_exactly_paid, judge_zero_invoices, judge_paid_during_outage]


@pytest.mark.parametrize("judge", SCENARIO_JUDGES)
def test_a_scenario_invoice_paid_and_never_dunned_is_fine(judge: Any) -> None:
    assert judge([scenario("inv_1"), scenario("inv_2")]).ok


@pytest.mark.parametrize("judge", SCENARIO_JUDGES)
@pytest.mark.parametrize("bad", [
    scenario(status="open"),  # e.g. 5.005 + 2.5025 + 2.5025 credited as 10.00 of 10.01
    scenario(status="overdue", overdue_rows=1, dunning=1),
    scenario(overdue_rows=1),  # paid in the end, but moved to overdue first
    scenario(dunning=1),  # an overdue e-mail was queued for it
])
def test_a_scenario_invoice_left_unpaid_or_dunned_breaks_the_invariant(judge: Any, bad: dict[str, Any]) -> None:
    invariant = judge([scenario("inv_ok"), {**bad, "id": "inv_bad"}])
    assert not invariant.ok and "inv_bad" in invariant.detail and "inv_ok" not in invariant.detail


def test_an_on_time_payment_recorded_late_breaks_the_outage_invariant() -> None:
    assert judge_exactly_paid([scenario(late_payments=1)]).ok  # lateness is the outage scenario's point only
    invariant = judge_paid_during_outage([scenario("inv_late", late_payments=1)])
    assert not invariant.ok and "1 late payments" in invariant.detail


@pytest.mark.parametrize("judge", SCENARIO_JUDGES)
def test_a_scenario_not_seeded_is_not_exercised(judge: Any) -> None:
    assert not judge([]).ok


def payment(pid: str, memo: str, *, tenant: str | None = "t1", reason: str | None = None, tx: str = "",
            operations: int = 1, pays: str | None = None) -> SeededPayment:
    return SeededPayment(pid, tx or f"tx_{pid}", memo, 100, tenant, reason, operations, pays)


SEEDED = [
    payment("1", "inv_a", pays="inv_a"),
    payment("2", "inv_b", tx="tx_multi", operations=2),
    payment("3", "inv_b", tx="tx_multi", operations=2, pays="inv_b"),
    payment("4", "inv_c", reason="asset_not_accepted"),
    payment("5", "inv_d", tenant=None, reason="skipped"),
]
BAITS = {"inv_c": "asset_not_accepted", "inv_d": "skipped"}


def row(pid: str, memo: str, *, invoice: str | None = None, outcome: str = "settled", reason: str | None = None,
        tenant: str = "t1", asset: tuple[str, str] = ("USD", ISSUER), tx: str = "") -> dict[str, Any]:
    return {"payment_id": pid, "transaction_hash": tx or f"tx_{pid}", "tenant_id": tenant,
            "to_account": f"acct_{tenant}", "asset_code": asset[0], "asset_issuer": asset[1], "memo": memo,
            "invoice_id": memo if invoice is None and outcome != "unmatched" else invoice, "outcome": outcome,
            "reason": reason}


def invoice(iid: str, status: str, *, tenant: str = "t1", currency: str = "USD", paid_rows: int = 0) -> dict[str, Any]:
    return {"id": iid, "tenant_id": tenant, "currency": currency, "status": status, "paid_rows": paid_rows}


def good_facts() -> PaymentFacts:
    rows = [row("1", "inv_a"), row("2", "inv_b", outcome="partial", tx="tx_multi"), row("3", "inv_b", tx="tx_multi"),
            row("4", "inv_c", outcome="unmatched", reason="asset_not_accepted", asset=("USD", OTHER_ISSUER))]
    invoices = [invoice("inv_a", "paid", paid_rows=1), invoice("inv_b", "paid", paid_rows=1),
                invoice("inv_c", "overdue"), invoice("inv_d", "overdue")]
    return PaymentFacts({r["payment_id"]: r for r in rows}, {i["id"]: i for i in invoices},
                        {"acct_t1": "t1", "acct_t2": "t2"})


def test_the_payment_judges_accept_a_good_state() -> None:
    facts = good_facts()
    for invariant in (judge_credited(facts, SEEDED, ACCEPTED), judge_unmatched(facts, SEEDED, BAITS),
                      judge_multi_operation(facts, SEEDED)):
        assert invariant.ok, (invariant.name, invariant.detail)


def with_row(facts: PaymentFacts, **changes: Any) -> PaymentFacts:
    pid = changes.pop("payment_id")
    return replace(facts, rows={**facts.rows, pid: {**facts.rows.get(pid, row(pid, "inv_x")), **changes}})


def with_invoice(facts: PaymentFacts, iid: str, **changes: Any) -> PaymentFacts:
    return replace(facts, invoices={**facts.invoices, iid: {**facts.invoices[iid], **changes}})


@pytest.mark.parametrize(("change", "needle"), [
    (lambda f: with_row(f, payment_id="1", invoice_id="inv_b"), "credited to inv_b"),
    (lambda f: with_row(f, payment_id="1", asset_code="XLM", asset_issuer=None), "credited a USD invoice"),
    (lambda f: with_row(f, payment_id="1", asset_issuer=OTHER_ISSUER), "credited a USD invoice"),
    (lambda f: with_invoice(f, "inv_a", currency="EUR"), "credited a EUR invoice"),
    (lambda f: with_invoice(f, "inv_a", tenant_id="t2"), "credited t2's invoice"),
    (lambda f: with_row(f, payment_id="1", to_account="acct_t2"), "to an account of t2, recorded for t1"),
    (lambda f: with_row(f, payment_id="1", to_account="acct_x"), "to an account of nobody: not ours"),
    (lambda f: with_row(f, payment_id="1", outcome="unmatched", invoice_id=None), "not credited to it"),
    (lambda f: with_invoice(f, "inv_a", status="overdue"), "inv_a not paid"),
])
def test_a_payment_credited_wrongly_or_not_at_all_breaks_the_invariant(change: Any, needle: str) -> None:
    invariant = judge_credited(change(good_facts()), SEEDED, ACCEPTED)
    assert not invariant.ok and needle in invariant.detail, invariant.detail


@pytest.mark.parametrize(("change", "needle"), [
    (lambda f: with_row(f, payment_id="4", outcome="settled", reason=None, invoice_id="inv_c"), "4 (asset_not"),
    (lambda f: with_row(f, payment_id="4", reason="unknown_invoice"), "unmatched/unknown_invoice"),
    (lambda f: with_row(f, payment_id="4", tenant_id="t2"), "for t2"),
    (lambda f: replace(f, rows={k: v for k, v in f.rows.items() if k != "4"}), "no row"),
    (lambda f: with_row(f, payment_id="5", outcome="unmatched", reason="unknown_invoice"), "was recorded"),
    (lambda f: with_invoice(f, "inv_d", status="paid"), "inv_d credited"),
    (lambda f: with_row(f, payment_id="9", memo="inv_c", invoice_id="inv_c", outcome="partial"), "inv_c credited"),
])
def test_an_unmatched_payment_credited_or_misrecorded_breaks_the_invariant(change: Any, needle: str) -> None:
    invariant = judge_unmatched(change(good_facts()), SEEDED, BAITS)
    assert not invariant.ok and needle in invariant.detail, invariant.detail


@pytest.mark.parametrize(("change", "needle"), [
    (lambda f: replace(f, rows={k: v for k, v in f.rows.items() if k != "2"}), "rows for 1 of them"),
    (lambda f: with_row(f, payment_id="2b", memo="inv_b", transaction_hash="tx_multi"), "and 1 others"),
    (lambda f: with_invoice(f, "inv_b", paid_rows=2), "moved to paid 2 times"),
])
def test_a_multi_operation_payment_applied_other_than_once_per_operation_breaks_the_invariant(
        change: Any, needle: str) -> None:
    invariant = judge_multi_operation(change(good_facts()), SEEDED)
    assert not invariant.ok and needle in invariant.detail, invariant.detail


def test_no_multi_operation_payment_seeded_is_a_scenario_not_exercised() -> None:
    assert not judge_multi_operation(good_facts(), [p for p in SEEDED if p.operations == 1]).ok


# -- Retry-After, trickle, tenants ------------------------------------------------------
def request(webhook_id: str, at: float, *, status: int = 200, retry_after: str | None = None,
            trickled: bool = False, cut: bool = False, endpoint: str = "hostile",
            tenant: str = "t1") -> ReceivedRequest:
    body = json.dumps({"type": "invoice.created", "data": {"tenant_id": tenant}}).encode()
    return ReceivedRequest(webhook_id, endpoint, 1, at, "127.0.0.1", True, None, status, at + 0.01, body,
                           retry_after, trickled, cut)


HUGE, GARBAGE = "9" * 40, "after lunch"
HOSTILE = {"msg_huge": HUGE, "msg_garbage": GARBAGE}
SUCCEEDED = {"msg_huge": "succeeded", "msg_garbage": "succeeded"}
LONGEST = 0.5  # the retry schedule's longest ceiling
GOOD_HOSTILE = [request("msg_huge", 10.0, status=429, retry_after=HUGE), request("msg_huge", 11.2),
                request("msg_garbage", 10.0, status=503, retry_after=GARBAGE), request("msg_garbage", 10.1)]


def test_hostile_retry_after_values_retried_within_their_floors_are_fine() -> None:
    invariant = judge_retry_after(GOOD_HOSTILE, SUCCEEDED, HOSTILE, 1.0, {"msg_huge": 0.98}, LONGEST)
    assert invariant.ok and "up to 0.98 s" in invariant.detail, invariant.detail


def test_a_retry_scheduled_beyond_the_cap_breaks_the_invariant() -> None:
    """The sender parked it years ahead: seen while the delivery waited, before any run could end."""
    invariant = judge_retry_after(GOOD_HOSTILE, SUCCEEDED, HOSTILE, 1.0, {"msg_huge": 3e9}, LONGEST)
    assert not invariant.ok and "scheduled 3000000000 s ahead, beyond the 1 s" in invariant.detail


def test_a_valid_huge_retry_after_retried_before_the_cap_breaks_the_invariant() -> None:
    seen = [request("msg_huge", 10.0, status=429, retry_after=HUGE), request("msg_huge", 10.3),
            request("msg_garbage", 10.0, status=503, retry_after=GARBAGE), request("msg_garbage", 10.1)]
    invariant = judge_retry_after(seen, SUCCEEDED, HOSTILE, 1.0, {}, LONGEST)
    assert not invariant.ok and "before its floor of 1 s" in invariant.detail


@pytest.mark.parametrize("retried", [False, True])
def test_a_delivery_parked_by_its_retry_after_breaks_the_invariant(retried: bool) -> None:
    """No request after the hostile answer (whatever the database says); or one,
    and yet the delivery is still waiting."""
    seen = [request("msg_huge", 10.0, status=429, retry_after=HUGE),
            request("msg_garbage", 10.0, status=503, retry_after=GARBAGE), request("msg_garbage", 10.1)]
    seen += [request("msg_huge", 11.5, status=500)] if retried else []
    statuses = {**SUCCEEDED, "msg_huge": "retrying" if retried else "succeeded"}
    invariant = judge_retry_after(seen, statuses, HOSTILE, 1.0, {}, LONGEST)
    assert not invariant.ok and "parked" in invariant.detail


def attempt(seconds: float, error: str | None = "timeout: the attempt's deadline passed") -> dict[str, Any]:
    return {"attempt": 1, "outcome": "failed", "error": error, "recorded": True, "seconds": seconds}


def trickle_requests(*, cut: bool = True) -> list[ReceivedRequest]:
    return [request("msg_t", 1.0, trickled=True, cut=cut, endpoint="trickle"),
            request("msg_t", 3.0, endpoint="trickle")]


def test_a_trickled_answer_cut_at_the_deadline_and_retried_is_fine() -> None:
    invariant = judge_trickle(trickle_requests(), {"msg_t": [attempt(1.5)]}, {"msg_t": "succeeded"}, {"msg_t"}, 0)
    assert invariant.ok, invariant.detail


@pytest.mark.parametrize(("requests", "attempts", "status", "kills", "needle"), [
    (trickle_requests(cut=False), [attempt(1.5)], "succeeded", 0, "read whole"),
    (trickle_requests(), [attempt(TRICKLE_GAP * 100 + 1)], "succeeded", 0, "the whole trickle's length"),
    (trickle_requests(), [attempt(1.5, error="500")], "succeeded", 0, "no attempt ended at its deadline"),
    (trickle_requests()[:1], [attempt(1.5)], "dead", 0, "not retried to success"),
])
def test_a_trickled_answer_not_cut_or_not_retried_breaks_the_invariant(
        requests: list[ReceivedRequest], attempts: list[dict[str, Any]], status: str, kills: int, needle: str) -> None:
    invariant = judge_trickle(requests, {"msg_t": attempts}, {"msg_t": status}, {"msg_t"}, kills)
    assert not invariant.ok and needle in invariant.detail, invariant.detail


def test_a_trickled_attempt_without_an_outcome_is_fine_only_when_replicas_were_killed() -> None:
    assert judge_trickle(trickle_requests(), {}, {"msg_t": "succeeded"}, {"msg_t"}, kills=1).ok
    assert not judge_trickle(trickle_requests(), {}, {"msg_t": "succeeded"}, {"msg_t"}, kills=0).ok


TENANT_OF = {"a": "t1", "b": "t2"}


def delivery(did: str, webhook: str, tenant: str, status: str = "succeeded") -> dict[str, Any]:
    return {"id": did, "webhook_id": webhook, "tenant_id": tenant, "subscription_tenant": TENANT_OF[webhook],
            "status": status}


GOOD_DELIVERIES = [delivery("d1", "a", "t1"), delivery("d2", "b", "t2"), delivery("d3", "b", "t1", "dead")]
GOOD_REQUESTS = [request("d1", 1.0, endpoint="a", tenant="t1"), request("d2", 1.0, endpoint="b", tenant="t2")]


def test_deliveries_each_to_their_own_tenant_and_a_refused_intruder_are_fine() -> None:
    invariant = judge_tenants(GOOD_DELIVERIES, [], GOOD_REQUESTS, TENANT_OF, {"d3"})
    assert invariant.ok, invariant.detail


@pytest.mark.parametrize(("deliveries", "outbox", "requests", "needle"), [
    ([*GOOD_DELIVERIES, delivery("d4", "a", "t2")], [], GOOD_REQUESTS, "d4: t2's event"),
    (GOOD_DELIVERIES, [], [*GOOD_REQUESTS, request("d5", 2.0, endpoint="a", tenant="t2")], "got t2's d5"),
    ([*GOOD_DELIVERIES[:2], delivery("d3", "b", "t1", "retrying")], [], GOOD_REQUESTS, "misaddressed d3"),
    (GOOD_DELIVERIES, [], [*GOOD_REQUESTS, request("d3", 2.0, endpoint="b", tenant="t2")], "sent"),
    (GOOD_DELIVERIES, [{"webhook_id": "b", "event_id": "e", "tenant_id": "t1", "subscription_tenant": "t2"}],
     GOOD_REQUESTS, "outbox: t1's e"),
])
def test_anything_crossing_tenants_breaks_the_invariant(deliveries: list[dict[str, Any]],
                                                        outbox: list[dict[str, Any]], requests: list[ReceivedRequest],
                                                        needle: str) -> None:
    invariant = judge_tenants(deliveries, outbox, requests, TENANT_OF, {"d3"})
    assert not invariant.ok and needle in invariant.detail, invariant.detail


# -- a subscription disabled by a 410, enabled again mid-run ----------------------------
DISABLED_AT, ENABLED_AT = 10.0, 20.0  # the 410 recorded at 10 s; the run enabled it again at 20 s
HELD = {"msg_g1", "msg_g2"}
DELIVERED = {"msg_g1": "succeeded", "msg_g2": "succeeded"}
GONE_REQUESTS = [request("msg_g1", 9.9, status=410, endpoint="gone"),  # the 410 itself
                 request("msg_g1", 20.5, endpoint="gone"), request("msg_g2", 20.6, endpoint="gone")]


def held_attempt(delivery_id: str, outcome: str, started_at: float) -> dict[str, Any]:
    return {"delivery_id": delivery_id, "outcome": outcome, "started_at": started_at}


GONE_ATTEMPTS = [held_attempt("msg_g1", "gone", 9.8), held_attempt("msg_g2", "disabled", 12.0),
                 held_attempt("msg_g1", "succeeded", 20.4), held_attempt("msg_g2", "succeeded", 20.5)]


def test_events_held_while_disabled_and_delivered_after_the_enable_are_fine() -> None:
    invariant = judge_held(GONE_REQUESTS, GONE_ATTEMPTS, DELIVERED, HELD, DISABLED_AT, ENABLED_AT)
    assert invariant.ok and "2 events held" in invariant.detail, invariant.detail


def test_an_attempt_started_before_the_disable_may_still_be_on_the_wire() -> None:
    """It read the subscription enabled; its 410 (or any answer) after the disable is fine."""
    attempts = [*GONE_ATTEMPTS, held_attempt("msg_g2", "gone", 9.95)]
    assert judge_held(GONE_REQUESTS, attempts, DELIVERED, HELD, DISABLED_AT, ENABLED_AT).ok


@pytest.mark.parametrize(("requests", "attempts", "statuses", "needle"), [
    # an attempt that started while disabled made a request
    (GONE_REQUESTS, [*GONE_ATTEMPTS, held_attempt("msg_g2", "failed", 15.0)], DELIVERED,
     "msg_g2: attempted while disabled"),
    # accepted before the enable
    ([*GONE_REQUESTS, request("msg_g2", 15.0, endpoint="gone")], GONE_ATTEMPTS, DELIVERED,
     "msg_g2: accepted before the subscription was enabled"),
    # a held event never delivered: lost
    (GONE_REQUESTS[:2], GONE_ATTEMPTS[:3], {**DELIVERED, "msg_g2": "held"}, "msg_g2: not delivered after the enable"),
    # dead-lettered (the old behaviour: an attempt on a disabled subscription killed the delivery)
    (GONE_REQUESTS[:2], GONE_ATTEMPTS[:3], {**DELIVERED, "msg_g2": "dead"}, "msg_g2: not delivered"),
])
def test_an_event_sent_while_disabled_or_lost_breaks_the_invariant(
        requests: list[ReceivedRequest], attempts: list[dict[str, Any]], statuses: dict[str, str],
        needle: str) -> None:
    invariant = judge_held(requests, attempts, statuses, HELD, DISABLED_AT, ENABLED_AT)
    assert not invariant.ok and needle in invariant.detail, invariant.detail


@pytest.mark.parametrize(("disabled_at", "enabled_at"), [(None, None), (DISABLED_AT, None)])
def test_a_subscription_never_disabled_and_enabled_again_is_a_scenario_not_exercised(
        disabled_at: float | None, enabled_at: float | None) -> None:
    invariant = judge_held(GONE_REQUESTS, GONE_ATTEMPTS, DELIVERED, HELD, disabled_at, enabled_at)
    assert not invariant.ok and "never disabled and enabled again" in invariant.detail
