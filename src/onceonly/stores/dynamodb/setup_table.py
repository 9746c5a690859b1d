"""setup(): the table, its ``due`` GSI and TTL, created or checked. Not bound by
the store's per-call deadline: a new table takes seconds to tens of seconds to
become ACTIVE; each request is bounded by the client's timeouts."""

from __future__ import annotations

import logging
from typing import Any

from botocore.exceptions import ClientError

from ...errors import StoreNotReadyError
from .errors import error_code
from .expressions import INDEX_NAME, TTL_ATTRIBUTE
from .table import Table

log = logging.getLogger(__name__)

TTL_ON = ("ENABLED", "ENABLING")


def setup(table: Table) -> None:
    """Create the table and its ``due`` GSI if missing, wait until they are
    ACTIVE, and turn on TTL by ``expire_at``. Idempotent, and safe when several
    processes call it at once."""
    described = _describe_table(table)
    if described is None:
        _create_table(table)
        described = _wait_until_active(table)
    elif described.get("TableStatus") != "ACTIVE":
        described = _wait_until_active(table)
    indexes = {index["IndexName"] for index in described.get("GlobalSecondaryIndexes", [])}
    if INDEX_NAME not in indexes:
        raise StoreNotReadyError(
            f"DynamoDB table {table.name!r} exists without the {INDEX_NAME!r} GSI"
            f" (hash qshard S, range claimable_at N, projection ALL): recreate it or add the index"
        )
    _enable_ttl(table)


def _enable_ttl(table: Table) -> None:
    """Turn on TTL deletion by ``expire_at`` unless it is on already. A local
    stand-in without the TTL API (dynalite), or a role without the TTL
    permissions, keeps every record: logged, not an error, since nothing but
    the table's size depends on it."""
    with table.translated("setup (enabling TTL)"):
        try:
            status, attribute = _ttl_status(table)
            if status in TTL_ON:
                if attribute != TTL_ATTRIBUTE:
                    log.warning("table %s expires items by %r, not %r: expiring records stay",
                                table.name, attribute, TTL_ATTRIBUTE)
                return
            try:
                table.client.update_time_to_live(
                    TableName=table.name,
                    TimeToLiveSpecification={"AttributeName": TTL_ATTRIBUTE, "Enabled": True},
                )
            except ClientError as exc:
                # A concurrent setup() may have enabled it since our describe.
                if error_code(exc) != "ValidationException" or _ttl_status(table)[0] not in TTL_ON:
                    raise
        except ClientError as exc:
            if error_code(exc) == "UnknownOperationException":
                log.info("table %s: this DynamoDB server has no TTL API; expiring records stay", table.name)
                return
            if error_code(exc) == "AccessDeniedException":
                # Leases do not depend on it: say what to grant (or declare TTL
                # with the table, as template.yaml does) and go on.
                log.warning("table %s: not allowed to check or turn on TTL by %r (dynamodb:DescribeTimeToLive,"
                            " dynamodb:UpdateTimeToLive); expiring records stay until TTL is on",
                            table.name, TTL_ATTRIBUTE)
                return
            raise


def _ttl_status(table: Table) -> tuple[str, str | None]:
    described = table.client.describe_time_to_live(TableName=table.name).get("TimeToLiveDescription", {})
    return str(described.get("TimeToLiveStatus", "DISABLED")), described.get("AttributeName")


def _describe_table(table: Table) -> dict[str, Any] | None:
    with table.translated("setup"):
        try:
            described: dict[str, Any] = table.client.describe_table(TableName=table.name)["Table"]
            return described
        except ClientError as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return None
            raise


def _create_table(table: Table) -> None:
    with table.translated("setup"):
        try:
            table.client.create_table(
                TableName=table.name,
                BillingMode="PAY_PER_REQUEST",
                AttributeDefinitions=[
                    {"AttributeName": "pk", "AttributeType": "S"},
                    {"AttributeName": "qshard", "AttributeType": "S"},
                    {"AttributeName": "claimable_at", "AttributeType": "N"},
                ],
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                GlobalSecondaryIndexes=[{
                    "IndexName": INDEX_NAME,
                    "KeySchema": [
                        {"AttributeName": "qshard", "KeyType": "HASH"},
                        {"AttributeName": "claimable_at", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                }],
            )
        except ClientError as exc:
            # Another process's setup() created it first: wait for theirs.
            if error_code(exc) != "ResourceInUseException":
                raise


def _wait_until_active(table: Table) -> dict[str, Any]:
    with table.translated("setup (waiting for the table)"):  # WaiterError included
        table.client.get_waiter("table_exists").wait(
            TableName=table.name, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
        )
    described = _describe_table(table)
    if described is None:
        raise StoreNotReadyError(f"DynamoDB table {table.name!r} vanished during setup()")
    return described
