"""PostgreSQL store: leases, due queues and counting semaphores on three
tables, every grant one statement (see postgres.sql). Times are the server's
clock."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import psycopg_pool
from psycopg.rows import dict_row

from ..api import Claim, ClaimBatch, Lease, LeaseState, Permit, QueueDepth
from ..errors import LeaseLostError, StoreNotReadyError, StoreRefusedError, StoreUnavailableError
from . import _common as common
from .pg_connection import ConnectionRefusedByServer, bound_this_transaction
from .pgpool import bounded_pool
from .sqlfile import load_queries

SQL = load_queries(Path(__file__).with_suffix(".sql"))
# Expired records deleted by each complete(expire=True): more than the one it
# adds, so a table fed by cron guards shrinks back to what is within keep.
PRUNE_PER_COMPLETE = 20
# Items, and bytes of payload, per put_many statement: keeps one statement's
# size (and the memory to build it) bounded; 1,000 payloads at the limit
# would be 256 MB.
PUT_BATCH = 1000
PUT_BATCH_BYTES = 8 * 1024 * 1024
# Statement -> the planner settings run before it in its transaction.
PLAN_SETTINGS = {"claim": "claim_plan"}


@contextmanager
def _translated(what: str) -> Iterator[None]:
    """Driver errors -> onceonly errors, with the cause kept."""
    try:
        yield
    except psycopg.errors.UndefinedTable as exc:
        raise StoreNotReadyError(
            f"PostgreSQL store: table missing during {what}; run store.setup() ({exc.diag.message_primary})"
        ) from exc
    except ConnectionRefusedByServer as exc:
        raise StoreRefusedError(f"PostgreSQL store: {exc}") from exc
    except psycopg_pool.PoolTimeout as exc:
        raise StoreUnavailableError(f"PostgreSQL store unreachable during {what}: {exc}") from exc
    except psycopg.Error as exc:
        raise StoreUnavailableError(f"PostgreSQL store error during {what}: {exc}") from exc


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
        answering (see :mod:`onceonly.stores.pgpool`). libpq's own options pass
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
        # to others next. Never prepared, on any pool (pg_connection.prepare_threshold_for).
        with _translated(what), self._pool.connection() as conn:
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
        with _translated("setup"), self._pool.connection() as conn, conn.transaction():
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
        return PostgresQueue(self, common.check_name(name, "queue name"))


class PostgresQueue:
    def __init__(self, store: PostgresStore, name: str) -> None:
        self._store = store
        self.name = name

    def put(self, item_id: str, due_at: float | None = None, payload: Any = None) -> None:
        self._put([common.check_put(item_id, due_at, payload)])

    def put_many(self, items: Iterable[tuple[str, float | None, Any]]) -> int:
        """One statement per PUT_BATCH items or PUT_BATCH_BYTES of payload."""
        puts = common.check_put_items(items)
        for run in common.batches([len(put.payload) for put in puts], PUT_BATCH, PUT_BATCH_BYTES):
            self._put(puts[run.start:run.stop])
        return len(puts)

    def _put(self, puts: Sequence[common.CheckedPut]) -> None:
        batch = common.last_put_per_item(puts)
        self._store._run("put_many", {"queue": self.name, "item_ids": [p.item_id for p in batch],
                                      "payloads": [p.payload for p in batch],
                                      "due_ats": [p.due_at for p in batch]})

    def put_if_absent(self, items: Iterable[tuple[str, float | None, Any]]) -> list[bool]:
        """One statement per PUT_BATCH items or PUT_BATCH_BYTES of payload."""
        checked = common.check_put_items(items)
        puts, kept = common.first_put_per_item(checked)
        done: set[str] = set()
        for run in common.batches([len(put.payload) for put in puts], PUT_BATCH, PUT_BATCH_BYTES):
            batch = puts[run.start:run.stop]
            rows = self._store._run("put_if_absent", {
                "queue": self.name, "item_ids": [p.item_id for p in batch], "payloads": [p.payload for p in batch],
                "due_ats": [p.due_at for p in batch]})
            done.update(row["item_id"] for row in rows)
        return common.absent_results(len(checked), puts, kept, done)

    def cancel(self, item_id: str) -> bool:
        params = {"queue": self.name, "item_id": common.check_name(item_id, "item_id")}
        return bool(self._store._run("cancel", params))

    def cancel_many(self, item_ids: Sequence[str]) -> list[bool]:
        """One statement for the whole batch."""
        ids = [common.check_name(item_id, "item_id") for item_id in item_ids]
        if not ids:
            return []
        removed = {row["item_id"] for row in self._store._run("cancel_many", {"queue": self.name, "item_ids": ids})}
        return common.first_listed(ids, removed)

    def claim(self, limit: int = 25, lease: float = 60.0, *, acks: Sequence[Claim] = ()) -> ClaimBatch:
        """The acks and the claim in one statement (postgres.sql): one round trip,
        one transaction; every argument is checked first."""
        acks = common.check_claims(acks, self.name)
        claims, acked = self._ack_and_claim(acks, common.check_limit(limit), common.check_seconds(lease, "lease"))
        return ClaimBatch(claims, acked)

    def ack(self, claim: Claim) -> bool:
        return self.ack_many([claim])[0]

    def ack_many(self, claims: Sequence[Claim]) -> list[bool]:
        claims = common.check_claims(claims, self.name)
        return self._ack_and_claim(claims, 0, 1.0)[1] if claims else []

    def _ack_and_claim(self, acks: Sequence[Claim], limit: int, lease: float) -> tuple[list[Claim], list[bool]]:
        params = {"queue": self.name, "item_ids": [c.item_id for c in acks], "tokens": [c.token for c in acks],
                  "owners": [c.owner for c in acks], "owner": common.new_owner(), "limit": limit, "lease": lease}
        rows: dict[str, list[dict[str, Any]]] = {"acked": [], "claimed": []}
        for row in self._store._run("claim", params):
            rows[row.pop("kind")].append(row)
        deleted = {(r["item_id"], r["token"], r["owner"]) for r in rows["acked"]}
        # The payload's JSON text as put, decoded as every store decodes it.
        claims = [Claim(queue=self.name, **{**row, "payload": common.decode_payload(row["payload"])})
                  for row in rows["claimed"]]
        # One delete per grant: a claim listed twice is acked once, as on Redis.
        acked = []
        for claim in acks:
            acked.append(common.grant_key(claim) in deleted)
            deleted.discard(common.grant_key(claim))
        return claims, acked

    def retry(self, claim: Claim, due_at: float) -> bool:
        claim, due = common.check_claim(claim, self.name), common.check_retry_due_at(due_at)
        params = {"queue": self.name, "item_id": claim.item_id, "token": claim.token,
                  "owner": claim.owner, "due_at": due}
        return bool(self._store._run("retry", params))

    def depth(self) -> QueueDepth:
        return QueueDepth(**self._store._run("depth", {"queue": self.name})[0])
