"""botocore's exceptions -> onceonly errors (see :mod:`onceonly.stores.errors`)."""

from __future__ import annotations

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoRegionError,
    ReadTimeoutError,
)

from ...errors import ConfigError, OnceOnlyError, StoreNotReadyError, StoreUnavailableError
from .expressions import INDEX_NAME


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def translate(exc: BaseException, what: str, table: str = "") -> OnceOnlyError | None:
    """The onceonly error for a botocore error during ``what`` on ``table``;
    None for any other exception."""
    if isinstance(exc, ClientError):
        code = error_code(exc)
        message = exc.response.get("Error", {}).get("Message", "")
        if code == "ResourceNotFoundException" or (code == "ValidationException" and "index" in message.lower()):
            return StoreNotReadyError(
                f"DynamoDB table {table!r} or its {INDEX_NAME!r} index is missing during {what};"
                f" run store.setup() or deploy the template's CoordinationTable ({code}: {message})"
            )
        return StoreUnavailableError(f"DynamoDB error during {what} on table {table!r}: {code}: {message}")
    if isinstance(exc, NoRegionError):
        return ConfigError(f"dynamodb store needs a region (during {what}): {exc}")
    if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError)):
        return StoreUnavailableError(f"DynamoDB unreachable during {what}: {exc}")
    if isinstance(exc, BotoCoreError):
        return StoreUnavailableError(f"DynamoDB error during {what} on table {table!r}: {exc}")
    return None
