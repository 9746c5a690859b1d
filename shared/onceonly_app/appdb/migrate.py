"""Apply the plain-SQL migrations in ``migrations/`` in name order, once each.
Safe to run from many processes at once: an advisory lock serialises them."""

from __future__ import annotations

from pathlib import Path

import psycopg

from onceonly.stores.pg_connection import prepare_threshold_for
from onceonly.stores.pgpool import split_options

MIGRATIONS_DIR = Path(__file__).parent / "migrations"

_TRACKING_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    name        text PRIMARY KEY,
    applied_at  timestamptz NOT NULL DEFAULT now()
)"""


CONNECT_TIMEOUT = 10  # seconds: an unreachable database fails the deploy, not hangs it


def migrate(url: str) -> list[str]:
    """Apply pending migrations; returns the names applied now. ``url`` may
    carry onceonly's own options (``timeout``, ``pool_mode``: behind a
    transaction pooler nothing is prepared, as in the functions' pool)."""
    applied_now: list[str] = []
    conninfo, options = split_options(url)
    with psycopg.connect(conninfo, connect_timeout=CONNECT_TIMEOUT,
                         prepare_threshold=prepare_threshold_for(options.transaction_pooled)) as conn, \
            conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('appdb.migrate'))")
        conn.execute(_TRACKING_TABLE)
        done = {row[0] for row in conn.execute("SELECT name FROM schema_migrations")}
        for path in sorted(MIGRATIONS_DIR.glob("*.sql")):
            if path.name in done:
                continue
            conn.execute(path.read_text(encoding="utf-8"))
            conn.execute("INSERT INTO schema_migrations (name) VALUES (%s)", (path.name,))
            applied_now.append(path.name)
    return applied_now
