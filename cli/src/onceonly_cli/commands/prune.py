"""`onceonly prune`: delete the cron-tick records whose keep has passed (PostgreSQL)."""

from __future__ import annotations

import argparse
from typing import Any

from .options import LOCAL_KEYWORDS, positive_int, store_options

NAME = "prune"


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        NAME, help="delete cron-tick records whose keep has passed (PostgreSQL)")
    store_options(parser, LOCAL_KEYWORDS)
    parser.add_argument("--batch", type=positive_int, default=1000, metavar="N",
                        help="records deleted per statement (default 1000)")
    return parser


def run(args: argparse.Namespace) -> int:
    from ..local.prune import prune

    return prune(args.database, args.store, args.batch)
