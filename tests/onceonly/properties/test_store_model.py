"""Model checking: on every store, random sequences of lease
and due-queue operations, each answer checked against the reference model.
A failure shrinks to a minimal sequence; the ones found are kept below as
regression tests."""

from __future__ import annotations

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.onceonly.properties.machine import LONG, SHORT, LeaseMachine, QueueMachine, RealClock, StoreMachine, bind
from tests.onceonly.properties.model import SLACK
from tests.onceonly.properties.profiles import DEFAULT, SOAK

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
# on every store; the unfenced ones also fail on the racy store
# (tests/support/stores/racy_store.py), whose acquire is only racy across processes.

def acquire_while_held(lm: LeaseMachine) -> None:
    lm.acquire(name="a", ttl=LONG)
    lm.acquire(name="a", ttl=LONG)
    assert len(lm.leases) == 1  # refused: the name is held


def renew_after_release(lm: LeaseMachine) -> None:
    lm.acquire(name="a", ttl=SHORT)
    lm.release(pick=0)
    lm.renew(pick=0, ttl=SHORT)
    assert len(lm.leases) == 1  # refused: no renewed lease


def renew_after_regrant(lm: LeaseMachine) -> None:
    lm.acquire(name="a", ttl=SHORT)
    lm.time_passes(seconds=SHORT + 4 * SLACK)
    lm.acquire(name="a", ttl=LONG)
    old, new = lm.leases
    assert new.token > old.token
    lm.renew(pick=0, ttl=LONG)
    assert len(lm.leases) == 2
    lm.complete(pick=0, keep=LONG)
    lm.inspect(name="a")


def ack_after_reschedule(qm: QueueMachine) -> None:
    qm.put(item_id="i1", delay=None)
    qm.claim(limit=1, lease=SHORT)
    qm.reschedule(pick=0, delay=None)
    qm.ack_many(picks=[0])
    qm.check_depth()


def ack_after_reclaim(qm: QueueMachine) -> None:
    qm.put(item_id="i1", delay=None)
    qm.claim(limit=1, lease=SHORT)
    qm.time_passes(seconds=SHORT + 4 * SLACK)
    qm.claim(limit=2, lease=LONG)
    assert len(qm.claims) == 2
    qm.ack(pick=0)
    qm.retry(pick=0, delay=0.0)
    qm.ack(pick=1)
    qm.check_depth()


UNFENCED = [(LeaseMachine, renew_after_release), (LeaseMachine, renew_after_regrant),
            (QueueMachine, ack_after_reschedule), (QueueMachine, ack_after_reclaim)]
REGRESSIONS = [(LeaseMachine, acquire_while_held), *UNFENCED]


def _ids(cases: list[tuple[type[StoreMachine], object]]) -> list[str]:
    return [getattr(fn, "__name__", "") for _, fn in cases]


@pytest.mark.parametrize(("machine", "sequence"), REGRESSIONS, ids=_ids(REGRESSIONS))
def test_regression(clocked_store, machine, sequence) -> None:  # type: ignore[no-untyped-def]
    sequence(bind(machine, *clocked_store)())


@pytest.mark.parametrize(("machine", "sequence"), UNFENCED, ids=_ids(UNFENCED))
def test_regression_fails_on_the_racy_store(racy_store, machine, sequence) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(AssertionError, match="stale"):
        sequence(bind(machine, racy_store, RealClock())())


@pytest.mark.soak
@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.__name__)
def test_machines_find_the_racy_store_out(racy_store, machine: type[StoreMachine]) -> None:  # type: ignore[no-untyped-def]
    found = settings(SOAK, phases=[Phase.generate])  # no shrinking: finding is enough
    with pytest.raises(AssertionError):
        run_state_machine_as_test(bind(machine, racy_store, RealClock()), settings=found)
