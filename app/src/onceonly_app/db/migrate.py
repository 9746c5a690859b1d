"""Apply the plain-SQL migrations in ``migrations/`` in name order, once each,
in one transaction. Safe to run from many processes at once: an advisory lock
serialises them.

On a live database a migration must not queue behind a long transaction for
long: while an ``ALTER`` waits for its lock, every later query on that table
waits behind it. So each statement may wait ``LOCK_TIMEOUT_SECONDS`` for a
lock, and the whole migration is retried a few times before it fails. Under a
deadline (the deploy's custom resource), every statement is also cut off when
the answer is due, and the COMMIT runs only if the deadline's owner still
allows it (a run answered FAILED never commits)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import psycopg

from onceonly.postgres import prepare_threshold_for, split_options

MIGRATIONS_DIR = Path(__file__).parent / "migrations"

_TRACKING_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    name        text PRIMARY KEY,
    applied_at  timestamptz NOT NULL DEFAULT now()
)"""
# Before the advisory lock: waiting for another migrator is bounded by the deadline only.
_STATEMENT_TIMEOUT = "SELECT set_config('statement_timeout', %s, true)"
# The key keeps the package's former name: a deploy of an older release takes
# the same lock, so two releases never migrate one database at once.
_SERIALISE = "SELECT pg_advisory_xact_lock(hashtext('appdb.migrate'))"
# After it: the migration's own statements give up on a table lock soon.
_LOCK_TIMEOUT = "SELECT set_config('lock_timeout', %s, true)"
_APPLIED = "SELECT name FROM schema_migrations"
_RECORD = "INSERT INTO schema_migrations (name) VALUES (%s)"

CONNECT_TIMEOUT = 10  # seconds: an unreachable database fails the deploy, not hangs it
LOCK_TIMEOUT_SECONDS = 5.0  # the longest a reader of an altered table waits behind the migration
LOCK_ATTEMPTS = 3
LOCK_RETRY_PAUSE_SECONDS = 2.0


class Deadline(Protocol):
    """Who decides whether the migration may still commit (the custom resource's answer)."""

    def seconds_left(self) -> float:
        """Until the answer is due: no statement may last longer."""
        ...

    def claim_commit(self) -> None:
        """Raise unless the migration may commit now."""
        ...


def latest_migration() -> str:
    """The name of the newest migration this code ships: its schema version."""
    return max((path.name for path in MIGRATIONS_DIR.glob("*.sql")), default="none")


# Work that must commit with the migrations, or not at all (the store switch's repair).
ThenStep = Callable[[psycopg.Connection[Any]], None]


def migrate(url: str, deadline: Deadline | None = None, *,
            lock_timeout: float = LOCK_TIMEOUT_SECONDS, attempts: int = LOCK_ATTEMPTS,
            then: ThenStep | None = None) -> list[str]:
    """Apply pending migrations, then ``then`` in the same transaction (under
    the same lock); returns the names applied now. ``url`` may
    carry onceonly's own options (``timeout``, ``pool_mode``: behind a
    transaction pooler nothing is prepared, as in the functions' pool). Raises
    psycopg.errors.LockNotAvailable when a table stayed locked through every
    attempt (nothing applied), and the deadline's error when it refuses the commit."""
    conninfo, options = split_options(url)
    with psycopg.connect(conninfo, connect_timeout=CONNECT_TIMEOUT, autocommit=True,
                         prepare_threshold=prepare_threshold_for(options.transaction_pooled)) as conn:
        for attempt in itertools.count(1):
            try:
                return _apply_pending(conn, deadline, lock_timeout, then)
            except psycopg.errors.LockNotAvailable as exc:
                if attempt == attempts or (deadline and deadline.seconds_left() < LOCK_RETRY_PAUSE_SECONDS):
                    raise psycopg.errors.LockNotAvailable(
                        f"a migration waited more than {lock_timeout:g} s for a table lock, {attempt} times (a long "
                        f"transaction holds it; nothing was applied): {str(exc).strip()}") from exc
                time.sleep(LOCK_RETRY_PAUSE_SECONDS)
    raise AssertionError("unreachable")  # itertools.count never ends; mypy cannot see it


def _apply_pending(conn: psycopg.Connection, deadline: Deadline | None, lock_timeout: float,
                   then: ThenStep | None) -> list[str]:
    applied_now: list[str] = []
    with conn.transaction():
        if deadline is not None:
            conn.execute(_STATEMENT_TIMEOUT, (f"{max(1, int(deadline.seconds_left() * 1000))}ms",))
        conn.execute(_SERIALISE)
        conn.execute(_LOCK_TIMEOUT, (f"{int(lock_timeout * 1000)}ms",))
        conn.execute(_TRACKING_TABLE)
        done = {row[0] for row in conn.execute(_APPLIED)}
        for path in sorted(MIGRATIONS_DIR.glob("*.sql")):
            if path.name in done:
                continue
            conn.execute(path.read_text(encoding="utf-8"))
            conn.execute(_RECORD, (path.name,))
            applied_now.append(path.name)
        if then is not None:
            then(conn)
        if deadline is not None:
            deadline.claim_commit()  # the last moment: after it, only COMMIT
    return applied_now
