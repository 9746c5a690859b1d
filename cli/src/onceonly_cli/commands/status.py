"""`onceonly status`: the due queue, dead letters, subscriptions' health, the last ticks and their leases."""

from __future__ import annotations

import argparse
from typing import Any

from .options import LOCAL_KEYWORDS, store_options

NAME = "status"


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        NAME, help="due queue, dead letters, held leases, last ticks")
    store_options(parser, LOCAL_KEYWORDS)
    parser.add_argument("--json", action="store_true", help="print the status as JSON, for scripts")
    return parser


def run(args: argparse.Namespace) -> int:
    from ..local.status import show_status

    return show_status(args.database, args.store, as_json=args.json)
