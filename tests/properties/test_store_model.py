"""Model checking (issue 11 item 5): on every store, random sequences of lease
and due-queue operations, each answer checked against the reference model.
A failure shrinks to a minimal sequence; the ones found are kept below as
regression tests."""

from __future__ import annotations

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.properties.machine import LONG, SHORT, LeaseMachine, QueueMachine, RealClock, StoreMachine, bind
from tests.properties.profiles import DEFAULT, SOAK

MACHINES = [LeaseMachine, QueueMachine]


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.__name__)
def test_store_matches_the_model(clocked_store, machine: type[StoreMachine]) -> None:  # type: ignore[no-untyped-def]
    run_state_machine_as_test(bind(machine, *clocked_store), settings=DEFAULT)


@pytest.mark.soak
@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.__name__)
def test_store_matches_the_model_soak(clocked_store, machine: type[StoreMachine]) -> None:  # type: ignore[no-untyped-def]
    run_state_machine_as_test(bind(machine, *clocked_store), settings=SOAK)


# -- regression examples: the minimal sequences the machines shrank to when a
# store's guard was removed on purpose (see docs/reliability.md). Each passes
# on every store and fails on the racy store (tests/support/racy_store.py).

def renew_after_release(lm: LeaseMachine) -> None:
    (lease,) = lm.acquire(name="a", ttl=SHORT).values
    lm.release(lease=lease)
    assert lm.renew(lease=lease, ttl=SHORT).values == ()


def renew_after_regrant(lm: LeaseMachine) -> None:
    (old,) = lm.acquire(name="a", ttl=SHORT).values
    lm.time_passes()
    (new,) = lm.acquire(name="a", ttl=LONG).values
    assert new.token > old.token
    assert lm.renew(lease=old, ttl=LONG).values == ()
    lm.complete(lease=old, keep=LONG)
    lm.inspect(name="a")


def ack_after_reschedule(qm: QueueMachine) -> None:
    qm.put(item_id="i1", delay=None)
    (claim,) = qm.claim(limit=1, lease=SHORT).values
    qm.reschedule(claim=claim, delay=None)
    qm.ack_many(batch=[claim])
    qm.depth()


def ack_after_reclaim(qm: QueueMachine) -> None:
    qm.put(item_id="i1", delay=None)
    (old,) = qm.claim(limit=1, lease=SHORT).values
    qm.time_passes()
    (new,) = qm.claim(limit=2, lease=LONG).values
    qm.ack(claim=old)
    qm.retry(claim=old, delay=0.0)
    qm.ack(claim=new)
    qm.depth()


REGRESSIONS = [(LeaseMachine, renew_after_release), (LeaseMachine, renew_after_regrant),
               (QueueMachine, ack_after_reschedule), (QueueMachine, ack_after_reclaim)]
IDS = [fn.__name__ for _, fn in REGRESSIONS]


@pytest.mark.parametrize(("machine", "sequence"), REGRESSIONS, ids=IDS)
def test_regression(clocked_store, machine, sequence) -> None:  # type: ignore[no-untyped-def]
    sequence(bind(machine, *clocked_store)())


@pytest.mark.parametrize(("machine", "sequence"), REGRESSIONS, ids=IDS)
def test_regression_fails_on_the_racy_store(racy_store, machine, sequence) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(AssertionError, match="stale"):
        sequence(bind(machine, racy_store, RealClock())())


@pytest.mark.soak
@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.__name__)
def test_machines_find_the_racy_store_out(racy_store, machine: type[StoreMachine]) -> None:  # type: ignore[no-untyped-def]
    found = settings(SOAK, phases=[Phase.generate])  # no shrinking: finding is enough
    with pytest.raises(AssertionError):
        run_state_machine_as_test(bind(machine, racy_store, RealClock()), settings=found)
