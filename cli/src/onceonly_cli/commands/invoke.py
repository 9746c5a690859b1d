"""`onceonly invoke FUNCTION -e EVENT`: one function of template.yaml, run locally without Docker."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .options import store_options

NAME = "invoke"


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        NAME, help="run one function of template.yaml locally, without Docker")
    parser.add_argument("function", metavar="FUNCTION_LOGICAL_ID")
    parser.add_argument("--event", "-e", type=Path, required=True, help="the event JSON file")
    parser.add_argument("--template", "-t", type=Path, default=None,
                        help="the SAM template (default: the project's template.yaml)")
    parser.add_argument("--env-vars", "-n", type=Path, help="SAM-style env vars JSON file")
    parser.add_argument("--no-setup", action="store_true",
                        help="do not apply the domain migrations or create the store's tables first")
    store_options(parser, "postgresql, redis (the local server, else a stand-in) or dynamodb (a stand-in)")
    return parser


def run(args: argparse.Namespace) -> int:
    from ..local.invocation import invoke_function

    return invoke_function(args.function, args.event, template=args.template, env_vars=args.env_vars,
                           setup=not args.no_setup, database=args.database, store=args.store)
