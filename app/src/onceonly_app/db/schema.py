"""A function that meets a missing table fails with one log line that names
the fix: the schema step (onceonly_app.schema_step), which deploys run
through the SchemaMigration custom resource and operators through
`onceonly migrate`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

import onceonly

FIX = ("apply the schema: run `onceonly migrate --database URL --store URL`, or deploy with a new "
       "SchemaRunId parameter (its SchemaMigration custom resource then runs the migrations again)")

F = TypeVar("F", bound=Callable[..., Any])


class SchemaMissingError(onceonly.OnceOnlyError):
    """A table the function needs does not exist: the schema was never applied."""


def missing_schema(exc: BaseException) -> BaseException | None:
    """The missing-table error behind ``exc`` (itself, or one a batch processor
    collected), else None."""
    if isinstance(exc, psycopg.errors.UndefinedTable | onceonly.StoreNotReadyError):
        return exc
    for child in getattr(exc, "child_exceptions", None) or ():  # Powertools BatchProcessingError
        cause = child[1] if isinstance(child, tuple) else child
        if isinstance(cause, BaseException) and missing_schema(cause):
            return cause
    return None


def schema_required(logger: Any) -> Callable[[F], F]:
    """Handler decorator: a missing table becomes one error log line naming
    the fix, then a SchemaMissingError (the invocation fails, nothing is lost)."""

    def decorate(handler: F) -> F:
        @functools.wraps(handler)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return handler(*args, **kwargs)
            except Exception as exc:
                cause = missing_schema(exc)
                if cause is None:
                    raise
                reason = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
                message = f"schema missing ({reason}): {FIX}"
                logger.error(message)
                raise SchemaMissingError(message) from exc

        return wrapper  # type: ignore[return-value]

    return decorate
