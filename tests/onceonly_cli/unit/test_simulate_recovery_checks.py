"""The recover judge of `onceonly simulate` (recovery_checks.py) holds on a good
run, including one whose last abort came a few ms before the recover, and
breaks on a bad one."""

from __future__ import annotations

from onceonly_cli.simulate.recovery_checks import judge_recover
from onceonly_cli.testing.receiver import ReceivedRequest

RECOVERED_AT = 100.0
IDS = {"msg_1", "msg_2"}


def request(delivery: str, at: float, status: int) -> ReceivedRequest:
    return ReceivedRequest(delivery, "abort", 1, at, None, True, None, status, at + 0.001)


def judge(requests: list[ReceivedRequest], statuses: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return judge_recover(requests, statuses or dict.fromkeys(IDS, "succeeded"), IDS, RECOVERED_AT,
                         [(2, 2, 2), (0, 0, 0)])


def test_an_abort_just_before_the_recover_counts_as_before_it() -> None:
    # the step read the last abort back and recovered 20 ms after the receiver got it
    requests = [request("msg_1", 90.0, 422), request("msg_2", RECOVERED_AT - 0.02, 422),
                request("msg_1", 101.0, 200), request("msg_2", 101.0, 200)]
    judged = judge(requests)
    assert judged.ok, judged.detail


def test_an_event_accepted_before_the_recover_breaks_it() -> None:
    requests = [request("msg_1", 90.0, 422), request("msg_2", 95.0, 200),
                request("msg_1", 101.0, 200), request("msg_2", 101.0, 200)]
    judged = judge(requests)
    assert not judged.ok and "msg_2: not aborted before the recover ([200])" in judged.cases


def test_an_event_not_delivered_after_the_recover_breaks_it() -> None:
    requests = [request("msg_1", 90.0, 422), request("msg_2", 91.0, 422), request("msg_1", 101.0, 200)]
    judged = judge(requests, {"msg_1": "succeeded", "msg_2": "aborted"})
    assert not judged.ok and "msg_2: not delivered after the recover (aborted)" in judged.cases
