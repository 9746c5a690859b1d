"""`onceonly redrive`: put dead-lettered deliveries back on the retry queue with a
fresh retry schedule (onceonly_app.webhooks.redrive does the work; this is the wiring)."""

from __future__ import annotations

import argparse

import psycopg
from rich.console import Console
from rich.table import Table

import onceonly

from .errors import CliError
from .ops import missing_tables, open_ops

BATCH = 100


def redrive_command(args: argparse.Namespace) -> int:
    from onceonly_app.webhooks.redrive import redrive

    with open_ops(args.database, args.store) as ops, ops.pool.connection() as conn:
        queue = ops.store.queue(ops.queue_name)
        done = []
        try:
            if args.delivery:
                done = redrive(conn, queue, delivery_ids=list(args.delivery), limit=len(args.delivery))
            else:
                while batch := redrive(conn, queue, limit=BATCH):
                    done.extend(batch)
        except psycopg.errors.UndefinedTable as exc:
            raise missing_tables(exc) from None
        except (psycopg.Error, onceonly.OnceOnlyError) as exc:
            raise CliError(f"redrive failed: {str(exc).splitlines()[0]}") from None
    if args.delivery:
        missing = sorted(set(args.delivery) - {item.delivery_id for item in done})
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
