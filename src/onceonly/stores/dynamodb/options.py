"""The options of a DynamoDB store URL (``dynamodb://TABLE?…``), each checked;
any other is refused (docs/coordination.md, "Store URL options")."""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from ...errors import ConfigError
from ..options import refuse_unknown
from ..timeouts import TIMEOUT_OPTION

STORE = "DynamoDB"
DEFAULT_SHARDS = 8
# How far apart the clocks of the store's clients are assumed to be (seconds):
# docs/coordination.md, "Clocks and skew". A holder counts its lease as ended
# this much early (onceonly.heartbeat), since a contender whose clock runs
# ahead by it sees the lease end that much early.
DEFAULT_CLOCK_SKEW = 1.0
MAX_CLOCK_SKEW = 60.0
MAX_SHARDS = 64  # claim and depth walk every shard: more would cost too many queries
CLOCK_SKEW_OPTION = "clock_skew"
URL_OPTIONS = ("region", "endpoint_url", "shards", CLOCK_SKEW_OPTION, TIMEOUT_OPTION)
TABLE_NAME = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")


def check_shards(value: object) -> int:
    try:
        shards = int(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else None
    except ValueError:
        shards = None
    if shards is None or not 1 <= shards <= MAX_SHARDS:
        raise ConfigError(f"dynamodb option shards must be an integer from 1 to {MAX_SHARDS}, got {value!r}")
    return shards


def check_clock_skew(value: object) -> float:
    try:
        skew = float(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) else None
    except ValueError:
        skew = None
    if skew is None or not 0 <= skew <= MAX_CLOCK_SKEW:
        raise ConfigError(f"dynamodb option {CLOCK_SKEW_OPTION} must be seconds from 0 to {MAX_CLOCK_SKEW:g},"
                          f" got {value!r}")
    return skew


def check_table(table: object) -> str:
    if not isinstance(table, str) or not TABLE_NAME.match(table):
        raise ConfigError(
            f"dynamodb table name must be 3-255 characters of A-Z a-z 0-9 _ . -, got {table!r}"
        )
    return table


def check_endpoint(endpoint_url: str) -> str:
    parts = urlsplit(endpoint_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"dynamodb option endpoint_url must be an http(s) URL, got {endpoint_url!r}")
    return endpoint_url


def check_options(options: Mapping[str, str]) -> None:
    """Refuse any option not in :data:`URL_OPTIONS`."""
    refuse_unknown(STORE, options, URL_OPTIONS)
