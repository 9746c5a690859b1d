"""`onceonly migrate`: apply the domain migrations and the coordination store's
setup() to the databases an operator names, the same step a deploy runs
through the SchemaMigration custom resource. Idempotent."""

from __future__ import annotations

import argparse

import onceonly

from .errors import CliError
from .stores import check_database, redact, resolve_targets


def migrate_command(args: argparse.Namespace) -> int:
    import psycopg

    from onceonly_app.appdb.schema import apply_schema

    targets = resolve_targets(args.database, args.store, servers=None)
    check_database(targets.database_url)
    try:
        report = apply_schema(targets.database_url, targets.store_url)
    except psycopg.Error as exc:
        raise CliError(f"migrating {redact(targets.database_url)} failed: {_first_line(exc)}") from None
    except onceonly.OnceOnlyError as exc:
        raise CliError(f"setting up the store {redact(targets.store_url)} failed: {_first_line(exc)}") from None
    applied = ", ".join(report.migrations_applied) or "none (already up to date)"
    print(f"database {redact(targets.database_url)}: migrations applied: {applied}")
    print(f"store {redact(targets.store_url)}: {report.store_kind} set up")
    return 0


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
