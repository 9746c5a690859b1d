"""Leases: one item ``lease#NAME`` each, every grant and every holder's write
ONE conditional UpdateItem (expressions.py names the conditions)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ...api import Lease, LeaseState
from ...errors import LeaseLostError
from .. import _common as common
from .expressions import (
    COMPLETE_EXPIRING_LEASE,
    COMPLETE_LEASE,
    EXTEND_LEASE,
    FALSE,
    GRANT_LEASE,
    LEASE_IS_FREE,
    LEASE_IS_HELD_BY_CALLER,
    ONE,
    RELEASE_LEASE,
    TRUE,
    ZERO,
    epoch,
    lease_key,
    names,
    number,
    string,
)
from .table import Table


class Leases:
    """The lease half of :class:`DynamoDBStore`."""

    _table: Table
    clock: Callable[[], float]

    def acquire(self, name: str, ttl: float = 30.0) -> Lease | None:
        name, ttl = common.check_name(name), common.check_seconds(ttl, "ttl")
        now = self.clock()
        response = self._table.conditional(
            self._table.start("acquire"), "update_item",
            Key=lease_key(name),
            ConditionExpression=LEASE_IS_FREE,
            UpdateExpression=GRANT_LEASE,
            ExpressionAttributeNames=names(LEASE_IS_FREE, GRANT_LEASE),
            ExpressionAttributeValues={
                ":now": epoch(now), ":until": epoch(now + ttl), ":owner": string(common.new_owner()),
                ":zero": ZERO, ":one": ONE, ":false": FALSE,
            },
            ReturnValues="ALL_NEW",
        )
        return None if response is None else _lease_from(name, response["Attributes"])

    def renew(self, lease: Lease, ttl: float = 30.0) -> Lease:
        ttl = common.check_seconds(ttl, "ttl")
        response = self._write_if_held(
            "renew", lease, EXTEND_LEASE, {":until": epoch(self.clock() + ttl)}, return_values="ALL_NEW"
        )
        if response is None:
            raise LeaseLostError(f"lease {lease.name!r} token {lease.token} is no longer held")
        return _lease_from(lease.name, response["Attributes"])

    def release(self, lease: Lease) -> bool:
        return self._write_if_held("release", lease, RELEASE_LEASE, {":now": epoch(self.clock())}) is not None

    def complete(self, lease: Lease, keep: float = 86400.0, *, expire: bool = False) -> bool:
        keep = common.check_seconds(keep, "keep")
        until = self.clock() + keep
        values = {":until": epoch(until), ":true": TRUE}
        if common.check_flag(expire, "expire"):
            values[":expire_at"] = number(math.ceil(until))
            return self._write_if_held("complete", lease, COMPLETE_EXPIRING_LEASE, values) is not None
        return self._write_if_held("complete", lease, COMPLETE_LEASE, values) is not None

    def _write_if_held(
        self, what: str, lease: Lease, update: str, values: dict[str, Any], return_values: str = "NONE"
    ) -> dict[str, Any] | None:
        return self._table.conditional(
            self._table.start(what), "update_item",
            Key=lease_key(common.check_lease(lease).name),
            ConditionExpression=LEASE_IS_HELD_BY_CALLER,
            UpdateExpression=update,
            ExpressionAttributeNames=names(LEASE_IS_HELD_BY_CALLER, update),
            ExpressionAttributeValues={
                ":owner": string(lease.owner), ":token": number(lease.token), ":false": FALSE, **values,
            },
            ReturnValues=return_values,
        )

    def inspect(self, name: str) -> LeaseState | None:
        key = lease_key(common.check_name(name))
        response = self._table.call(self._table.start("inspect"), "get_item", Key=key, ConsistentRead=True)
        item = response.get("Item")
        if item is None:
            return None
        return LeaseState(
            name=name,
            owner=item["owner"]["S"] if "owner" in item else None,
            token=int(item["token"]["N"]),
            busy_until=float(item["busy_until"]["N"]),
            completed=bool(item["completed"]["BOOL"]),
        )


def _lease_from(name: str, attributes: dict[str, Any]) -> Lease:
    return Lease(
        name=name,
        owner=attributes["owner"]["S"],
        token=int(attributes["token"]["N"]),
        expires_at=float(attributes["busy_until"]["N"]),
    )
