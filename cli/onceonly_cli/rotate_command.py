"""`onceonly rotate-secret`: give a subscription a new signing secret while the
old one keeps signing beside it for the overlap (the same change as
`onceonly subscriptions rotate-secret`, recorded in the audit as the OS user:
onceonly_app.webhooks.subscriptions does the work; this is the wiring). The new
secret is printed on stdout, for the receiver's configuration, and nowhere else."""

from __future__ import annotations

import argparse
import os
import sys

import psycopg

from .errors import CliError
from .ops import missing_tables
from .servers import DEFAULT_POSTGRES_URL
from .stores import check_database
from .subscriptions_command import default_actor


def rotate_secret_command(args: argparse.Namespace) -> int:
    from onceonly_app.webhooks.subscriptions import (
        DEFAULT_OVERLAP,
        SubscriptionDeletedError,
        UnknownSubscriptionError,
        rotate_secret,
    )

    overlap = DEFAULT_OVERLAP if args.overlap is None else args.overlap
    database_url = args.database or os.environ.get("DATABASE_URL") or DEFAULT_POSTGRES_URL
    check_database(database_url)
    with psycopg.connect(database_url, autocommit=True, connect_timeout=5) as conn:
        try:
            secret = rotate_secret(conn, args.webhook_id, overlap=overlap, actor=default_actor(),
                                   secret=args.secret)
        except (UnknownSubscriptionError, SubscriptionDeletedError, ValueError) as exc:
            raise CliError(str(exc)) from None
        except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn) as exc:
            raise missing_tables(exc) from None
        except psycopg.Error as exc:
            raise CliError(f"rotation failed: {str(exc).splitlines()[0]}") from None
    print(f"{args.webhook_id}: the old secret keeps signing beside the new one for {overlap:g} s",
          file=sys.stderr)
    print(secret)
    return 0
