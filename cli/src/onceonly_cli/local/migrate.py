"""`onceonly migrate`: apply the domain migrations and the coordination store's
setup() to the databases an operator names, the same step a deploy runs
through the SchemaMigration custom resource, store identity check and repair
included (``--repair`` forces the repair, ``--stack`` hands the database to
another stack). Idempotent."""

from __future__ import annotations

import onceonly

from ..errors import CliError
from .stores import check_database, redact, resolve_targets


def migrate(database: str | None, store: str | None, *, repair: bool = False, stack: str | None = None) -> int:
    """Migrate ``database`` and set up ``store`` (None: $DATABASE_URL and
    $ONCEONLY_STORE_URL, the store defaulting to the database); ``repair``:
    repair the store even if it looks unchanged; ``stack``: hand the database
    over to this CloudFormation stack id."""
    import psycopg

    from onceonly_app.db.store_switch import stack_of
    from onceonly_app.schema_step import apply_schema

    targets = resolve_targets(database, store, servers=None)
    check_database(targets.database_url)
    if stack is not None and ":stack/" not in stack:
        raise CliError(f"--stack needs a CloudFormation stack id (arn:aws:cloudformation:REGION:ACCOUNT:stack/NAME/…), "
                       f"got {stack!r}")
    try:
        report = apply_schema(targets.database_url, targets.store_url, stack=stack_of(stack),
                              force_repair=repair, hand_over=stack is not None)
    except psycopg.Error as exc:
        raise CliError(f"migrating {redact(targets.database_url)} failed: {_first_line(exc)}") from None
    except onceonly.OnceOnlyError as exc:
        raise CliError(f"setting up the store {redact(targets.store_url)} failed: {_first_line(exc)}") from None
    applied = ", ".join(report.migrations_applied) or "none (already up to date)"
    print(f"database {redact(targets.database_url)}: migrations applied: {applied}")
    print(f"store {redact(targets.store_url)}: {report.store_kind} set up")
    print(report.store_switch.summary())
    return 0


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
