"""Counting semaphores: one item ``sem#NAME`` each, holding one attribute per
holder (its expiry) and ``n``, how many there are (expressions.py names the
conditions).

take_permit is ONE conditional UpdateItem while the count leaves room. The
count includes holders whose ttl ended (DynamoDB cannot count by value in a
condition), so when the semaphore looks full take_permit looks at the item:
the one the failed write returns (ALL_OLD on a failed condition), or, where
the server sends none (dynalite), one consistent GetItem. Only if some holders
have ended does it write again, evicting them and adding the new one in one
conditional write: a crashed holder's place is taken back by the next take
that needs it. return_permit is ONE conditional UpdateItem."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...api import Permit
from .. import _common as common
from .deadline import Deadline
from .expressions import (
    ADD_HOLDER,
    HOLDER_EXISTS,
    HOLDER_PREFIX,
    MAX_EVICT,
    ONE,
    REMOVE_HOLDER,
    SEMAPHORE_HAS_ROOM,
    ZERO,
    epoch,
    evict_update,
    evicted_condition,
    holder_attribute,
    names,
    number,
    semaphore_key,
)
from .table import Table


class Semaphores:
    """The counting-semaphore part of :class:`DynamoDBStore`."""

    _table: Table
    clock: Callable[[], float]

    def take_permit(self, name: str, limit: int, ttl: float = 30.0) -> Permit | None:
        name, limit = common.check_name(name), common.check_permit_limit(limit)
        ttl = common.check_seconds(ttl, "ttl")
        holder, now = common.new_owner(), self.clock()
        permit = Permit(name=name, holder=holder, expires_at=float(epoch(now + ttl)["N"]))
        deadline = self._table.start("take_permit")
        added, seen = self._add(deadline, permit, limit)
        if added or self._evict_and_add(deadline, permit, limit, now, seen):
            return permit
        return None

    def take_permits(self, wants: Sequence[tuple[str, int]], ttl: float = 30.0) -> list[Permit | None]:
        """One take_permit per want: DynamoDB has no write that may succeed for some items and not others."""
        return [self.take_permit(name, limit, ttl) for name, limit in common.check_wants(wants)]

    def return_permits(self, permits: Sequence[Permit]) -> list[bool]:
        """One return_permit per permit."""
        return [self.return_permit(permit) for permit in common.check_permits(permits)]

    def return_permit(self, permit: Permit) -> bool:
        permit = common.check_permit(permit)
        response = self._table.conditional(
            self._table.start("return_permit"), "update_item",
            Key=semaphore_key(permit.name),
            ConditionExpression=HOLDER_EXISTS,
            UpdateExpression=REMOVE_HOLDER,
            ExpressionAttributeNames={"#holder": holder_attribute(permit.holder), "#n": "n"},
            ExpressionAttributeValues={":one": ONE},
            ReturnValues="UPDATED_OLD",
        )
        if response is None:  # returned already, or evicted after it ended
            return False
        ended_at = float(response["Attributes"][holder_attribute(permit.holder)]["N"])
        return ended_at > self.clock()

    def _add(self, deadline: Deadline, permit: Permit, limit: int) -> tuple[bool, dict[str, Any] | None]:
        """Whether the holder was added; if not, the item as the failed condition saw it, if sent."""
        response, seen = self._table.conditional_or_old(
            deadline, "update_item",
            Key=semaphore_key(permit.name),
            ConditionExpression=SEMAPHORE_HAS_ROOM,
            UpdateExpression=ADD_HOLDER,
            ExpressionAttributeNames={**names(SEMAPHORE_HAS_ROOM, ADD_HOLDER),
                                      "#holder": holder_attribute(permit.holder)},
            ExpressionAttributeValues={":limit": number(limit), ":until": epoch(permit.expires_at),
                                       ":zero": ZERO, ":one": ONE},
        )
        return response is not None, seen

    def _evict_and_add(self, deadline: Deadline, permit: Permit, limit: int, now: float,
                       seen: dict[str, Any] | None) -> bool:
        """The semaphore looked full (``seen``: the item the failed add saw, if
        the server sent it; else it is read): evict the holders whose ttl ended
        (MAX_EVICT per write) and add ``permit`` once that makes room."""
        item = seen if seen is not None else self._table.call(
            deadline, "get_item", Key=semaphore_key(permit.name), ConsistentRead=True).get("Item")
        if item is None:
            return self._add(deadline, permit, limit)[0]  # gone since the first write: try once more
        ended = sorted((float(value["N"]), key) for key, value in item.items()
                       if key.startswith(HOLDER_PREFIX) and float(value["N"]) <= now)
        count = int(item["n"]["N"])
        for start in range(0, len(ended), MAX_EVICT):
            batch = [key for _, key in ended[start:start + MAX_EVICT]]
            add = count - len(batch) < limit
            if not self._evict(deadline, permit, batch, add=add, limit=limit):
                # another take or a return changed the holders since the read:
                # one plain try, which succeeds if that left room
                return self._add(deadline, permit, limit)[0]
            if add:
                return True
            count -= len(batch)
        return False

    def _evict(self, deadline: Deadline, permit: Permit, batch: list[str], *, add: bool, limit: int) -> bool:
        aliases = [f"#e{i}" for i in range(len(batch))]
        values: dict[str, Any] = {":delta": number((1 if add else 0) - len(batch))}
        attribute_names = {alias: key for alias, key in zip(aliases, batch, strict=True)} | {"#n": "n"}
        if add:
            values |= {":room": number(limit + len(batch)), ":until": epoch(permit.expires_at)}
            attribute_names["#holder"] = holder_attribute(permit.holder)
        return self._table.conditional(
            deadline, "update_item",
            Key=semaphore_key(permit.name),
            ConditionExpression=evicted_condition(aliases, room=add),
            UpdateExpression=evict_update(aliases, add=add),
            ExpressionAttributeNames=attribute_names,
            ExpressionAttributeValues=values,
        ) is not None
