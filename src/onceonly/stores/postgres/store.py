"""PostgresStore: leases and counting semaphores; its queues are queue.py's.
Every grant is one statement of sql/store.sql, run by :meth:`PostgresStore._run`.
Times are the server's clock."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg_pool
from psycopg.rows import dict_row

from ...api import Lease, LeaseState, Permit
from ...errors import LeaseLostError
from .. import _common as common
from ..errors import translated
from ..sqlfile import load_queries
from .connection import bound_this_transaction
from .errors import translate
from .pool import bounded_pool
from .queue import PostgresQueue

SQL = load_queries(Path(__file__).with_name("sql") / "store.sql")
# Expired records deleted by each complete(expire=True): more than the one it
# adds, so a table fed by cron guards shrinks back to what is within keep.
PRUNE_PER_COMPLETE = 20
# Statement -> the planner settings run before it in its transaction.
PLAN_SETTINGS = {"claim": "claim_plan"}


class PostgresStore:
    """Leases and queues on PostgreSQL. Pass your own ``psycopg_pool.ConnectionPool``
    (autocommit connections) or build one with :meth:`from_url`."""

    kind = "postgresql"
    # Expiry is decided by the server's clock: no skew between clients to allow for.
    clock_skew = 0.0

    def __init__(self, pool: psycopg_pool.ConnectionPool[Any], *, owns_pool: bool = False) -> None:
        self._pool = pool
        self._owns_pool = owns_pool

    @classmethod
    def from_url(cls, url: str, *, max_size: int = 4, refresh_url: Callable[[], str] | None = None) -> PostgresStore:
        """``postgresql://…?timeout=10``: every operation fails with
        StoreUnavailableError within ``timeout`` seconds when the server stops
        answering (see :mod:`onceonly.stores.postgres.pool`). libpq's own options pass
        through. ``refresh_url`` (optional) returns the URL with fresh
        credentials; it is called once after an authentication failure (a
        rotated password). ``?pool_mode=transaction`` (implied by an RDS Proxy
        host) declares a transaction pooler; the store never prepares
        statements either way, so a pooler left undeclared cannot make it run
        a statement it did not send. A
        connection the server refuses for good raises StoreRefusedError with
        the server's message."""
        pool = bounded_pool(url, name="onceonly", max_size=max_size, autocommit=True, refresh_url=refresh_url,
                            prepares=False)
        return cls(pool, owns_pool=True)

    def _run(self, what: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        # The statement bound and the statement share one implicit transaction
        # (one sync): one round trip, and a transaction-local setting leaves
        # nothing behind on a server connection that a transaction pooler hands
        # to others next. Never prepared, on any pool (connection.prepare_threshold_for).
        with translated(translate, what), self._pool.connection() as conn:
            with conn.pipeline():
                bound_this_transaction(conn)
                if what in PLAN_SETTINGS:
                    conn.execute(SQL[PLAN_SETTINGS[what]], prepare=False)
                cur = conn.cursor(row_factory=dict_row)
                cur.execute(SQL[what], params, prepare=False)
            return cur.fetchall() if cur.description else []

    # -- setup ------------------------------------------------------------
    def setup(self) -> None:
        # Concurrent setup() calls race on CREATE ... IF NOT EXISTS; a
        # transaction-scoped advisory lock serialises them.
        with translated(translate, "setup"), self._pool.connection() as conn, conn.transaction():
            bound_this_transaction(conn)
            # IF NOT EXISTS answers "already exists, skipping" notices: not news.
            conn.execute("SELECT set_config('client_min_messages', 'warning', true)", prepare=False)
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('onceonly.setup'))", prepare=False)
            conn.execute(SQL["setup"], prepare=False)

    def close(self) -> None:
        if self._owns_pool:
            self._pool.close()

    # -- leases -------------------------------------------------------------
    def acquire(self, name: str, ttl: float = 30.0) -> Lease | None:
        params = {"name": common.check_name(name), "ttl": common.check_seconds(ttl, "ttl"),
                  "owner": common.new_owner()}
        rows = self._run("acquire", params)
        return Lease(**rows[0]) if rows else None

    def renew(self, lease: Lease, ttl: float = 30.0) -> Lease:
        lease = common.check_lease(lease)
        params = {"name": lease.name, "owner": lease.owner, "token": lease.token,
                  "ttl": common.check_seconds(ttl, "ttl")}
        rows = self._run("renew", params)
        if not rows:
            raise LeaseLostError(f"lease {lease.name!r} token {lease.token} is no longer held")
        return Lease(**rows[0])

    def release(self, lease: Lease) -> bool:
        lease = common.check_lease(lease)
        return bool(self._run("release", {"name": lease.name, "owner": lease.owner, "token": lease.token}))

    def complete(self, lease: Lease, keep: float = 86400.0, *, expire: bool = False) -> bool:
        """With ``expire``, the same statement also deletes up to PRUNE_PER_COMPLETE
        records whose keep has passed: a guard that adds a record per tick removes
        the old ones as it goes."""
        lease = common.check_lease(lease)
        params = {"name": lease.name, "owner": lease.owner, "token": lease.token,
                  "keep": common.check_seconds(keep, "keep")}
        if common.check_flag(expire, "expire"):
            return bool(self._run("complete_and_prune", {**params, "prune_limit": PRUNE_PER_COMPLETE}))
        return bool(self._run("complete", params))

    def prune_expired(self, limit: int = 1000) -> int:
        """Delete up to ``limit`` records completed with ``expire=True`` whose keep
        has passed; returns how many. ``onceonly prune`` calls it until it returns 0."""
        return len(self._run("prune_expired", {"limit": common.check_limit(limit)}))

    def inspect(self, name: str) -> LeaseState | None:
        rows = self._run("inspect", {"name": common.check_name(name)})
        return LeaseState(**rows[0]) if rows else None

    # -- counting semaphores -------------------------------------------------
    def take_permit(self, name: str, limit: int, ttl: float = 30.0) -> Permit | None:
        (permit,) = self.take_permits([(name, limit)], ttl)
        return permit

    def take_permits(self, wants: Sequence[tuple[str, int]], ttl: float = 30.0) -> list[Permit | None]:
        """One statement for any number of semaphores (one more per repeat of a name)."""
        wants, ttl = common.check_wants(wants), common.check_seconds(ttl, "ttl")
        holders = [common.new_owner() for _ in wants]
        permits: list[Permit | None] = [None] * len(wants)
        for round_ in common.distinct_rounds([name for name, _ in wants]):
            rows = self._run("take_permits", {"names": [wants[i][0] for i in round_], "ttl": ttl,
                                              "holders": [holders[i] for i in round_],
                                              "limits": [wants[i][1] for i in round_]})
            taken = {row["name"]: row["expires_at"] for row in rows}
            for i in round_:
                name = wants[i][0]
                if name in taken:
                    permits[i] = Permit(name=name, holder=holders[i], expires_at=taken[name])
        return permits

    def return_permit(self, permit: Permit) -> bool:
        (held,) = self.return_permits([permit])
        return held

    def return_permits(self, permits: Sequence[Permit]) -> list[bool]:
        """One statement for any number of permits."""
        permits = common.check_permits(permits)
        if not permits:
            return []
        rows = self._run("return_permits", {"names": [p.name for p in permits], "holders": [p.holder for p in permits]})
        held = {(row["name"], row["holder"]): bool(row["held"]) for row in rows}
        # A permit listed twice is returned once: the repeat finds it gone.
        return [held.pop((p.name, p.holder), False) for p in permits]

    def queue(self, name: str) -> PostgresQueue:
        return PostgresQueue(self._run, common.check_name(name, "queue name"))
