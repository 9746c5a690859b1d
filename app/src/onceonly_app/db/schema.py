"""The schema the functions need, as one step: the domain migrations plus the
coordination store's setup(), and the record of which store (and stack) the
database is set up for, with the repair a change of store needs
(store_switch.py). Deploys run it through the SchemaMigration custom
resource, operators through `onceonly migrate`. A function that still meets a
missing table fails with one log line that names this fix."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg

import onceonly

from .migrate import Deadline, latest_migration, migrate
from .store_identity import identify
from .store_switch import SwitchReport, reconcile

FIX = ("apply the schema: run `onceonly migrate --database URL --store URL`, or deploy with a new "
       "SchemaRunId parameter (its SchemaMigration custom resource then runs the migrations again)")

F = TypeVar("F", bound=Callable[..., Any])


class SchemaMissingError(onceonly.OnceOnlyError):
    """A table the function needs does not exist: the schema was never applied."""


@dataclass(frozen=True)
class SchemaReport:
    migrations_applied: list[str]
    store_kind: str
    schema_version: str  # the newest migration the database now has
    store_switch: SwitchReport  # what the store's identity check did (unchanged, or the repair)
    retry_queue_depth: int  # the webhook retry queue's items, after the step


def apply_schema(database_url: str, store_url: str, deadline: Deadline | None = None, *,
                 stack: str | None = None, force_repair: bool = False, hand_over: bool = False) -> SchemaReport:
    """The store's setup(), then the pending domain migrations and the store
    identity check (the repair after a change of store, store_switch.py) in one
    transaction. Idempotent, and safe from many processes at once (an advisory
    lock, a conditional create); an upgrade applies only the new migrations.
    The COMMIT comes last, so under a ``deadline`` nothing else can still be
    running when the answer is given. ``stack`` (a CloudFormation stack id)
    claims the database for that stack: another stack's is refused with
    StackConflictError unless ``hand_over``. ``force_repair`` repairs even when
    the store looks unchanged."""
    from onceonly_app.webhooks.config import WebhookConfig

    webhooks = WebhookConfig.from_env()
    store = onceonly.connect(store_url)
    switch: list[SwitchReport] = []

    def check_store(conn: psycopg.Connection[Any]) -> None:
        switch[:] = [reconcile(conn, store, identity, queue_name=webhooks.queue_name,
                               requeue_lease=webhooks.attempt_lease, stack=stack, force=force_repair,
                               hand_over=hand_over)]

    try:
        store.setup()
        identity = identify(store, store_url)
        applied = migrate(database_url, deadline, then=check_store)
        depth = store.queue(webhooks.queue_name).depth().total
    finally:
        store.close()
    return SchemaReport(applied, identity.kind, latest_migration(), switch[0], depth)


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
