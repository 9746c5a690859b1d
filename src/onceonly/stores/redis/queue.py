"""RedisQueue: a due queue on two keys sharing one hash tag (the layout: the
store's docstring). It runs the store's scripts through the function the store
hands it, so this module needs nothing of store.py."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ...api import Claim, ClaimBatch, QueueDepth
from .. import _common as common
from .units import epoch_ms, milliseconds, seconds, text

# (script name, keys, arguments) -> its reply.
Run = Callable[[str, Sequence[str], Sequence[str | int]], Any]


class RedisQueue:
    """A due queue on two keys sharing one hash tag (see the module docstring)."""

    def __init__(self, prefix: str, run: Run, name: str) -> None:
        self._run_script = run
        self.name = name
        tagged = f"{prefix}:{{q:{name}}}"
        self._keys = [f"{tagged}:sched", f"{tagged}:rec"]

    def _run(self, what: str, args: Sequence[str | int] = ()) -> Any:
        return self._run_script(what, self._keys, args)

    def put(self, item_id: str, due_at: float | None = None, payload: Any = None) -> None:
        self._put([common.check_put(item_id, due_at, payload)])

    def put_many(self, items: Iterable[tuple[str, float | None, Any]]) -> int:
        """One script call for the whole batch (see ``lua/put.lua``)."""
        return self._put(common.check_put_items(items))

    def _put(self, puts: Sequence[common.CheckedPut]) -> int:
        if not puts:
            return 0
        args = [field for put in puts
                for field in (put.item_id, put.payload, "" if put.due_at is None else epoch_ms(put.due_at))]
        return int(self._run("put", args))

    def put_if_absent(self, items: Iterable[tuple[str, float | None, Any]]) -> list[bool]:
        """One script call for the whole batch (see ``lua/put_if_absent.lua``)."""
        checked = common.check_put_items(items)
        puts, kept = common.first_put_per_item(checked)
        if not puts:
            return []
        args = [field for put in puts
                for field in (put.item_id, put.payload, "" if put.due_at is None else epoch_ms(put.due_at))]
        done = {put.item_id for put, put_now in zip(puts, self._run("put_if_absent", args), strict=True) if put_now}
        return common.absent_results(len(checked), puts, kept, done)

    def cancel(self, item_id: str) -> bool:
        return self.cancel_many([item_id])[0]

    def cancel_many(self, item_ids: Sequence[str]) -> list[bool]:
        """One script call for the whole batch (see ``lua/cancel.lua``)."""
        ids = [common.check_name(item_id, "item_id") for item_id in item_ids]
        return [bool(removed) for removed in self._run("cancel", ids)] if ids else []

    def claim(self, limit: int = 25, lease: float = 60.0, *, acks: Sequence[Claim] = ()) -> ClaimBatch:
        acks = common.check_claims(acks, self.name)
        limit = common.check_limit(limit)
        lease_ms = milliseconds(common.check_seconds(lease, "lease"))
        owner = common.new_owner()
        expires_ms, acked, rows = self._claim_script(owner, limit, lease_ms, acks)
        expires_at = seconds(expires_ms)
        claims = []
        for i in range(0, len(rows), 2):
            # the item's new record: "token attempt owner payload"
            token, attempt, _, payload = str(text(rows[i + 1])).split(" ", 3)
            claims.append(Claim(queue=self.name, item_id=str(text(rows[i])), payload=common.decode_payload(payload),
                                token=int(token), attempt=int(attempt), owner=owner, lease_expires_at=expires_at))
        return ClaimBatch(claims, acked)

    def ack(self, claim: Claim) -> bool:
        return self.ack_many([claim])[0]

    def ack_many(self, claims: Sequence[Claim]) -> list[bool]:
        claims = common.check_claims(claims, self.name)
        if not claims:
            return []
        # The claim script with limit 0: its ack half only (owner and lease unused).
        return self._claim_script("-", 0, 1, claims)[1]

    def _claim_script(
        self, owner: str, limit: int, lease_ms: int, acks: Sequence[Claim]
    ) -> tuple[int, list[bool], list[Any]]:
        """Run lua/claim.lua: (lease expiry ms, ack results, claimed items as id, record, id, …)."""
        args: list[str | int] = [owner, limit, lease_ms]
        args.extend(field for c in acks for field in (c.item_id, c.token, c.owner))
        expires_ms, count, *rest = self._run("claim", args)
        return int(expires_ms), [bool(a) for a in rest[:count]], rest[count:]

    def retry(self, claim: Claim, due_at: float) -> bool:
        claim, due = common.check_claim(claim, self.name), common.check_retry_due_at(due_at)
        return bool(self._run("retry", [claim.item_id, claim.token, claim.owner, epoch_ms(due)]))

    def depth(self) -> QueueDepth:
        due, scheduled, in_flight = self._run_script("depth", self._keys[:1], ())
        return QueueDepth(due=int(due), scheduled=int(scheduled), in_flight=int(in_flight))
