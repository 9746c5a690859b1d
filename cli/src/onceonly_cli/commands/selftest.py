"""`onceonly selftest`: race processes against a store and check their history."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .options import positive_int

NAME = "selftest"


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        NAME, help="race processes against a store and check the history")
    parser.add_argument("--store", metavar="URL",
                        help="postgresql://, redis:// or dynamodb://TABLE?region=… (default: $ONCEONLY_STORE_URL)")
    parser.add_argument("--procs", type=positive_int, default=4, metavar="N",
                        help="processes, at least 2 (default 4)")
    parser.add_argument("--items", type=positive_int, default=200, metavar="M",
                        help="queue items to work through (default 200)")
    parser.add_argument("--seconds", type=positive_int, default=20, metavar="S",
                        help="race for at most this long, then drain what is left (default 20)")
    parser.add_argument("--yes", action="store_true",
                        help="run even though the store holds other onceonly data (it is never touched)")
    parser.add_argument("--history", type=Path, metavar="FILE.jsonl",
                        help="where to keep the operation history (default: a temporary file)")
    return parser


def run(args: argparse.Namespace) -> int:
    from ..local.selftest_session import run_session

    return run_session(args.store, procs=args.procs, items=args.items, seconds=args.seconds, yes=args.yes,
                       history=args.history)
