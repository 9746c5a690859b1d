"""`onceonly prune`: delete the cron-tick records whose keep has passed.

Only PostgreSQL needs it, and even there the cron guard prunes as it goes (each
completion deletes a few expired records; see docs/coordination.md): this is for
a backlog, e.g. a table from before expiry existed, or jobs that stopped. Redis
expires the records itself and DynamoDB deletes them by TTL."""

from __future__ import annotations

import onceonly
from onceonly.postgres import PostgresStore

from ..errors import CliError
from .ops import existing_targets
from .stores import open_store, redact

SELF_EXPIRING = {
    "redis": "Redis expires completed tick records itself (their key expires when keep ends)",
    "dynamodb": "DynamoDB deletes completed tick records by TTL on their expire_at attribute",
}


def prune(database: str | None, store: str | None, batch: int) -> int:
    """Delete expired tick records, ``batch`` per statement; print how many."""
    _, store_url = existing_targets(database, store)
    opened = open_store(store_url, setup=False)
    try:
        if not isinstance(opened, PostgresStore):
            print(f"{SELF_EXPIRING[getattr(opened, 'kind', '')]}: nothing to prune in {redact(store_url)}")
            return 0
        total = 0
        try:
            while pruned := opened.prune_expired(batch):
                total += pruned
        except onceonly.OnceOnlyError as exc:
            raise CliError(f"prune stopped after {total} records: {str(exc).splitlines()[0]}") from None
        print(f"pruned {total} expired tick records from {redact(store_url)}")
        return 0
    finally:
        opened.close()
