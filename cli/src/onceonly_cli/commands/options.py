"""Option types and groups the commands share: each turns a bad value into
argparse's one-line usage error."""

from __future__ import annotations

import argparse


def store_options(parser: argparse.ArgumentParser, keywords: str) -> None:
    parser.add_argument("--database", metavar="URL",
                        help="domain PostgreSQL URL (default: $DATABASE_URL, else a local PostgreSQL)")
    parser.add_argument("--store", metavar="KIND|URL",
                        help=f"coordination store: {keywords}, or a URL: postgresql://, redis:// or "
                             "dynamodb://TABLE?endpoint_url=… (default: $ONCEONLY_STORE_URL, else the database)")


LOCAL_KEYWORDS = "postgresql or redis (the local server)"


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def rate(text: str) -> float:
    value = non_negative_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value
