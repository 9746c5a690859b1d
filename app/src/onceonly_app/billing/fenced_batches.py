"""A daily job's work as a series of batches, each one transaction fenced by
the tick's token (ticks.py), until nothing is left or the invocation's time
runs low. Batches committed stand whatever happens to the run after them."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from onceonly import Tick

from ..runtime.budget import Budget, RunOutOfTimeError
from .ticks import TickFence

BATCH_SECONDS = 10.0  # kept free for one more batch: a statement and its commit
HELD_ELSEWHERE_PAUSE = 0.05  # seconds between batches while the work left is locked by another transaction

# One batch: given the fenced transaction's connection, do the work and say
# how many rows it handled and whether more may be left.
Batch = Callable[[psycopg.Connection[Any]], tuple[int, bool]]


@dataclass(frozen=True)
class BatchRun:
    done: int  # rows handled, over every batch
    batches: int


def run_fenced_batches(pool: ConnectionPool, tick: Tick, batch: Batch, *, budget: Budget | None,
                       result_key: str) -> BatchRun:
    """Stamp the tick's fence, then run ``batch`` until it reports nothing left;
    record ``{result_key: done}`` as the tick's result. Raises FencedError (a
    LeaseLostError) when a newer run of the tick stamped: the batch in progress
    rolls back. Raises RunOutOfTimeError when the budget runs low with work
    left: the guard releases the tick and its retry goes on from there."""
    budget = budget or Budget.unlimited()
    fence = TickFence(pool, tick)
    fence.stamp()
    done = batches = 0
    while True:
        with fence.transaction() as conn:
            count, more = batch(conn)
        done += count
        batches += 1
        if not more:
            break
        if count == 0:
            # Work is left that this batch could not take: another transaction
            # holds its rows. Wait a moment for it to commit instead of spinning.
            time.sleep(HELD_ELSEWHERE_PAUSE)
        if not budget.allows(BATCH_SECONDS):
            raise RunOutOfTimeError(f"{tick.job}: stopped near the deadline after {done} rows ({result_key})")
        tick.renew()
    fence.finish({result_key: done})
    return BatchRun(done=done, batches=batches)
