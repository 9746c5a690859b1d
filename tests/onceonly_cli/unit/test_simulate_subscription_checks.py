"""The subscription judges of `onceonly simulate` hold on a good state and break
on a bad one (subscription_checks.py): each is fed what the receiver and the
database would hold after a run, once right and then with one thing wrong."""

from __future__ import annotations

import json

from onceonly_cli.simulate.subscription_checks import judge_caps, judge_filters, judge_nothing_lost, max_open
from onceonly_cli.testing.receiver import ReceivedRequest

TYPES = {"invoice.paid", "invoice.overdue"}


def request(endpoint: str, kind: str, start: float = 0.0, end: float = 0.1, delivery: str = "msg_1") -> ReceivedRequest:
    body = json.dumps({"type": kind, "data": {}}).encode()
    return ReceivedRequest(delivery, endpoint, 1, start, None, True, None, 200, end, body=body)


# -- filters ------------------------------------------------------------------------------------------------
def test_only_wanted_types_reaching_filtered_subscriptions_is_fine() -> None:
    requests = [request("a", "invoice.paid"), request("a", "invoice.created"),  # a direct feed: not fanned out
                request("b", "invoice.overdue")]  # b wants every type
    judged = judge_filters(requests, {"a": ["invoice.paid"], "b": None}, TYPES, unwanted_events=3)
    assert judged.ok, judged.detail


def test_an_unwanted_type_sent_to_a_filtered_subscription_breaks_the_invariant() -> None:
    requests = [request("a", "invoice.paid"), request("a", "invoice.overdue", delivery="msg_bad")]
    judged = judge_filters(requests, {"a": ["invoice.paid"]}, TYPES, unwanted_events=3)
    assert not judged.ok and "a got invoice.overdue (msg_bad)" in judged.detail


def test_no_event_a_filter_left_out_is_a_scenario_not_exercised() -> None:
    judged = judge_filters([request("a", "invoice.paid")], {"a": ["invoice.paid"]}, TYPES, unwanted_events=0)
    assert not judged.ok and "not exercised" in judged.detail


# -- caps ---------------------------------------------------------------------------------------------------
def test_max_open_counts_requests_open_at_one_moment() -> None:
    assert max_open([request("a", "t", 0, 1), request("a", "t", 0.5, 2), request("a", "t", 1.5, 3)]) == 2
    assert max_open([request("a", "t", 0, 1), request("a", "t", 1, 2)]) == 1  # back to back
    assert max_open([]) == 0


def test_endpoints_within_their_caps_are_fine() -> None:
    requests = [request("a", "t", 0, 1), request("a", "t", 0.5, 2), request("b", "t", 0, 5)]
    judged = judge_caps(requests, {"a": 2, "b": 1})
    assert judged.ok and "2 reached their cap" in judged.detail, judged.detail


def test_an_endpoint_over_its_cap_breaks_the_invariant() -> None:
    requests = [request("a", "t", 0, 1), request("a", "t", 0.2, 1), request("a", "t", 0.4, 1),
                request("other", "t", 0, 1), request("other", "t", 0, 1)]  # not capped: not judged
    judged = judge_caps(requests, {"a": 2})
    assert not judged.ok and "a: 3 requests open at once, cap 2" in judged.detail


def test_no_capped_endpoint_is_a_scenario_not_exercised() -> None:
    assert not judge_caps([], {}).ok


# -- nothing lost -------------------------------------------------------------------------------------------
def test_every_delivery_to_a_capped_endpoint_finished_is_fine() -> None:
    judged = judge_nothing_lost({"d1": "succeeded", "d2": "dead"}, {"a": {"d1", "d2"}}, accepted={"d1"})
    assert judged.ok, judged.detail


def test_a_delivery_stuck_missing_or_never_received_breaks_the_invariant() -> None:
    expected = {"a": {"d1", "d2", "d3"}}
    for statuses, accepted, needle in (
            ({"d1": "succeeded", "d2": "retrying", "d3": "dead"}, {"d1"}, "d2 of a: retrying"),
            ({"d1": "succeeded", "d3": "dead"}, {"d1"}, "d2 of a: never created"),
            ({"d1": "succeeded", "d2": "succeeded", "d3": "dead"}, {"d1"}, "d2 of a: succeeded")):
        judged = judge_nothing_lost(statuses, expected, accepted)
        assert not judged.ok and needle in judged.detail, judged.detail
