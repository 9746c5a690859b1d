"""`onceonly rotate-secret`: give a subscription a new signing secret while the
old one keeps signing beside it for the overlap (onceonly_app.webhooks.rotation
does the work; this is the wiring). The new secret is printed on stdout, for the
receiver's configuration, and nowhere else."""

from __future__ import annotations

import argparse
import os
import sys

import psycopg

from .errors import CliError
from .ops import missing_tables
from .servers import DEFAULT_POSTGRES_URL
from .stores import check_database


def rotate_secret_command(args: argparse.Namespace) -> int:
    from onceonly.stores.pgpool import bounded_pool
    from onceonly_app.webhooks.deliveries import DeliveryRepository
    from onceonly_app.webhooks.rotation import DEFAULT_OVERLAP, UnknownSubscriptionError, rotate_secret

    overlap = DEFAULT_OVERLAP if args.overlap is None else args.overlap
    database_url = args.database or os.environ.get("DATABASE_URL") or DEFAULT_POSTGRES_URL
    check_database(database_url)
    with bounded_pool(database_url, name="onceonly-cli", max_size=1, autocommit=False, session_bound=True) as pool:
        try:
            secret = rotate_secret(DeliveryRepository(pool), args.webhook_id, overlap=overlap)
        except UnknownSubscriptionError as exc:
            raise CliError(str(exc)) from None
        except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn) as exc:
            raise missing_tables(exc) from None
        except psycopg.Error as exc:
            raise CliError(f"rotation failed: {str(exc).splitlines()[0]}") from None
    print(f"{args.webhook_id}: the old secret keeps signing beside the new one for {overlap:g} s",
          file=sys.stderr)
    print(secret)
    return 0
