"""`onceonly redrive`: re-queue dead-lettered webhook deliveries."""

from __future__ import annotations

import argparse
from typing import Any

from .options import LOCAL_KEYWORDS, store_options

NAME = "redrive"


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(NAME, help="re-queue dead-lettered webhook deliveries")
    store_options(parser, LOCAL_KEYWORDS)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--delivery", metavar="ID", action="append", help="a dead delivery's id (repeatable)")
    which.add_argument("--all", action="store_true", help="every dead delivery")
    return parser


def run(args: argparse.Namespace) -> int:
    from ..local.redrive import redrive_deliveries

    return redrive_deliveries(args.database, args.store, None if args.all else args.delivery)
