"""Model checking (issue 11 item 5): on every store, random sequences of lease
and due-queue operations, each answer checked against the reference model.
A failure shrinks to a minimal sequence; the ones found are kept below as
regression tests."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from tests.properties.machine import LONG, SHORT, LeaseMachine, QueueMachine, StoreMachine, bind

MACHINES = [LeaseMachine, QueueMachine]


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.__name__)
def test_store_matches_the_model(clocked_store, machine: type[StoreMachine]) -> None:  # type: ignore[no-untyped-def]
    run_state_machine_as_test(bind(machine, *clocked_store))


@pytest.mark.soak
@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.__name__)
def test_store_matches_the_model_soak(clocked_store, machine: type[StoreMachine]) -> None:  # type: ignore[no-untyped-def]
    run_state_machine_as_test(bind(machine, *clocked_store), settings=settings.get_profile("soak"))


# -- regression examples: the minimal sequences the machines shrank to when a
# store's guard was removed on purpose (see docs/reliability.md), replayed on
# every store as plain tests.

def test_regression_renew_after_release_is_refused(clocked_store) -> None:  # type: ignore[no-untyped-def]
    m = bind(LeaseMachine, *clocked_store)()
    (lease,) = m.acquire(name="a", ttl=SHORT).values
    m.release(lease=lease)
    assert m.renew(lease=lease, ttl=SHORT).values == ()


def test_regression_renew_after_regrant_is_refused(clocked_store) -> None:  # type: ignore[no-untyped-def]
    m = bind(LeaseMachine, *clocked_store)()
    (old,) = m.acquire(name="a", ttl=SHORT).values
    m.time_passes()
    (new,) = m.acquire(name="a", ttl=LONG).values
    assert new.token > old.token
    assert m.renew(lease=old, ttl=LONG).values == ()
    m.complete(lease=old, keep=LONG)
    m.inspect(name="a")


def test_regression_ack_after_reschedule_is_refused(clocked_store) -> None:  # type: ignore[no-untyped-def]
    m = bind(QueueMachine, *clocked_store)()
    m.put(item_id="i1", delay=None)
    (claim,) = m.claim(limit=1, lease=SHORT).values
    m.reschedule(claim=claim, delay=None)
    m.ack_many(batch=[claim])
    m.depth()


def test_regression_ack_after_reclaim_is_refused(clocked_store) -> None:  # type: ignore[no-untyped-def]
    m = bind(QueueMachine, *clocked_store)()
    m.put(item_id="i1", delay=None)
    (old,) = m.claim(limit=1, lease=SHORT).values
    m.time_passes()
    (new,) = m.claim(limit=2, lease=LONG).values
    m.ack(claim=old)
    m.retry(claim=old, delay=0.0)
    m.ack(claim=new)
    m.depth()
