"""PostgresQueue: a due queue on the store's tables. It runs the store's named
statements (sql/store.sql) through the function the store hands it, so this
module needs nothing of store.py."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ...api import Claim, ClaimBatch, QueueDepth
from .. import _common as common

# Items, and bytes of payload, per put_many statement: keeps one statement's
# size (and the memory to build it) bounded; 1,000 payloads at the limit
# would be 256 MB.
PUT_BATCH = 1000
PUT_BATCH_BYTES = 8 * 1024 * 1024
# (statement name, parameters) -> the rows it returned.
Run = Callable[[str, dict[str, Any]], list[dict[str, Any]]]


class PostgresQueue:
    """A due queue: ``run`` is the store's statement runner (PostgresStore._run)."""

    def __init__(self, run: Run, name: str) -> None:
        self._run = run
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
        self._run("put_many", {"queue": self.name, "item_ids": [p.item_id for p in batch],
                                      "payloads": [p.payload for p in batch],
                                      "due_ats": [p.due_at for p in batch]})

    def put_if_absent(self, items: Iterable[tuple[str, float | None, Any]]) -> list[bool]:
        """One statement per PUT_BATCH items or PUT_BATCH_BYTES of payload."""
        checked = common.check_put_items(items)
        puts, kept = common.first_put_per_item(checked)
        done: set[str] = set()
        for run in common.batches([len(put.payload) for put in puts], PUT_BATCH, PUT_BATCH_BYTES):
            batch = puts[run.start:run.stop]
            rows = self._run("put_if_absent", {
                "queue": self.name, "item_ids": [p.item_id for p in batch], "payloads": [p.payload for p in batch],
                "due_ats": [p.due_at for p in batch]})
            done.update(row["item_id"] for row in rows)
        return common.absent_results(len(checked), puts, kept, done)

    def cancel(self, item_id: str) -> bool:
        params = {"queue": self.name, "item_id": common.check_name(item_id, "item_id")}
        return bool(self._run("cancel", params))

    def cancel_many(self, item_ids: Sequence[str]) -> list[bool]:
        """One statement for the whole batch."""
        ids = [common.check_name(item_id, "item_id") for item_id in item_ids]
        if not ids:
            return []
        removed = {row["item_id"] for row in self._run("cancel_many", {"queue": self.name, "item_ids": ids})}
        return common.first_listed(ids, removed)

    def claim(self, limit: int = 25, lease: float = 60.0, *, acks: Sequence[Claim] = ()) -> ClaimBatch:
        """The acks and the claim in one statement (sql/store.sql): one round trip,
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
        for row in self._run("claim", params):
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
        return bool(self._run("retry", params))

    def depth(self) -> QueueDepth:
        return QueueDepth(**self._run("depth", {"queue": self.name})[0])
