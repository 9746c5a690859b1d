"""`onceonly redrive`: put dead-lettered deliveries back on the retry queue with a
fresh retry schedule (onceonly_app.webhooks.redrive does the work; this is the wiring)."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from rich.console import Console
from rich.table import Table

import onceonly

from ..errors import CliError
from .ops import missing_tables, open_ops

BATCH = 100


def redrive_deliveries(database: str | None, store: str | None, delivery_ids: Sequence[str] | None) -> int:
    """Re-queue the dead deliveries ``delivery_ids`` (None: every dead one); print them."""
    from onceonly_app.webhooks.redrive import redrive

    with open_ops(database, store) as ops, ops.pool.connection() as conn:
        queue = ops.store.queue(ops.queue_name)
        done = []
        try:
            if delivery_ids is not None:
                if delivery_ids:
                    done = redrive(conn, queue, delivery_ids=list(delivery_ids), limit=len(delivery_ids))
            else:
                while batch := redrive(conn, queue, limit=BATCH):
                    done.extend(batch)
        except psycopg.errors.UndefinedTable as exc:
            raise missing_tables(exc) from None
        except (psycopg.Error, onceonly.OnceOnlyError) as exc:
            raise CliError(f"redrive failed: {str(exc).splitlines()[0]}") from None
    if delivery_ids is not None:
        missing = sorted(set(delivery_ids) - {item.delivery_id for item in done})
        if missing:
            raise CliError(f"not dead-lettered (or unknown): {', '.join(missing)}"
                           + (f"; re-driven: {len(done)}" if done else ""))
    table = Table(title=f"re-driven deliveries: {len(done)}", title_justify="left")
    table.add_column("delivery (webhook-id)")
    table.add_column("generation", justify="right")
    for item in done:
        table.add_row(item.delivery_id, str(item.generation))
    Console().print(table)
    return 0
