"""Fencing a job's database writes with its tick's lease token (see ticks.sql).

The lease keeps a second run of the tick from starting; the fence keeps a run
that was paused past its lease from committing after a newer run began."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from onceonly import LeaseLostError, Tick
from onceonly_app.sql_queries import load_queries

SQL = load_queries(Path(__file__).with_suffix(".sql"))


class FencedError(LeaseLostError):
    """A newer run of the tick stamped the fence: this run's writes are refused."""


class TickFence:
    def __init__(self, pool: ConnectionPool, tick: Tick) -> None:
        self._pool = pool
        self._tick = tick
        self._params = {"job": tick.job, "scheduled_time": tick.scheduled_time, "token": tick.token}

    def stamp(self) -> None:
        """Claim the fence for this run's token. Raises FencedError if a newer run did."""
        with self._pool.connection() as conn, conn.transaction():
            if conn.execute(SQL["stamp"], self._params).fetchone() is None:
                raise self._refused("stamp")

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """A transaction that commits only while this run holds the fence.
        Raises FencedError (and rolls back) if a newer run stamped."""
        with self._pool.connection() as conn, conn.transaction():
            if conn.execute(SQL["hold"], self._params).fetchone() is None:
                raise self._refused("commit")
            yield conn

    def finish(self, result: dict[str, Any]) -> None:
        with self._pool.connection() as conn, conn.transaction():
            row = conn.execute(SQL["finish"], {**self._params, "result": json.dumps(result)}).fetchone()
        if row is None:
            raise self._refused("finish")

    def _refused(self, what: str) -> FencedError:
        return FencedError(
            f"{self._tick.job} tick {self._tick.scheduled_time:%Y-%m-%dT%H:%M:%SZ}: {what} refused, "
            f"a run with a newer token than {self._tick.token} owns the tick"
        )
