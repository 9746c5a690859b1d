"""`onceonly migrate`: the domain migrations and the store's setup, as a deploy applies them."""

from __future__ import annotations

import argparse
from typing import Any

NAME = "migrate"


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        NAME, help="apply the domain migrations and the store's setup (idempotent)")
    parser.add_argument("--database", metavar="URL",
                        help="domain PostgreSQL URL (default: $DATABASE_URL; required if that is unset)")
    parser.add_argument("--store", metavar="URL",
                        help="coordination store URL (default: $ONCEONLY_STORE_URL, else the database)")
    parser.add_argument("--repair", action="store_true",
                        help="reset the fences and re-queue deliveries into the store even if it looks unchanged "
                             "(after a store switch, once the old functions stopped: docs/deploy.md)")
    parser.add_argument("--stack", metavar="STACK_ID",
                        help="hand the database over to this CloudFormation stack (arn:…:stack/NAME/…)")
    return parser


def run(args: argparse.Namespace) -> int:
    from ..local.migrate import migrate

    return migrate(args.database, args.store, repair=args.repair, stack=args.stack)
