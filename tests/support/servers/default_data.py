"""The user's default data, the one `onceonly status` shows without options
(postgresql://postgres@127.0.0.1:5432/test): a fingerprint of every table in
it, so a test session can prove it left that database as it found it."""

from __future__ import annotations

import psycopg
from psycopg import sql

from onceonly_cli.testing.servers import DEFAULT_POSTGRES_URL, postgres_reachable

USER_TABLES = """
SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
   AND n.nspname NOT LIKE 'pg_toast%' AND n.nspname NOT LIKE 'pg_temp%'
 ORDER BY 1, 2"""
# Row count and a digest of every row's text, independent of row order.
TABLE_DIGEST = "SELECT count(*), md5(coalesce(string_agg(md5(t::text), '' ORDER BY md5(t::text)), '')) FROM {} t"

Fingerprint = dict[str, tuple[int, str]]


def fingerprint(url: str = DEFAULT_POSTGRES_URL) -> Fingerprint | None:
    """``schema.table -> (rows, digest)`` of every table in ``url``'s database,
    or None when that database is not there (nothing of the user's to protect)."""
    if not postgres_reachable(url):
        return None
    with psycopg.connect(url, autocommit=True) as conn:
        tables = conn.execute(USER_TABLES).fetchall()
        result: Fingerprint = {}
        for schema, table in tables:
            query = sql.SQL(TABLE_DIGEST).format(sql.Identifier(schema, table))
            count, digest = conn.execute(query).fetchone()  # type: ignore[misc]
            result[f"{schema}.{table}"] = (int(count), str(digest))
    return result


def changes(before: Fingerprint, after: Fingerprint) -> list[str]:
    """What differs, one line per table."""
    lines = []
    for name in sorted(before.keys() | after.keys()):
        if name not in after:
            lines.append(f"{name}: dropped")
        elif name not in before:
            lines.append(f"{name}: created ({after[name][0]} rows)")
        elif before[name] != after[name]:
            lines.append(f"{name}: {before[name][0]} rows before, {after[name][0]} after, contents changed")
    return lines
