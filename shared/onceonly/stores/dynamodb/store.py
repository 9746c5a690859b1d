"""DynamoDBStore: built from a URL or around your own client; leases come from
leases.py, counting semaphores from semaphores.py, queues from queue.py,
requests go through table.py."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, NoRegionError

from ...errors import ConfigError
from .. import _common as common
from ..timeouts import DEFAULT_TIMEOUT, TIMEOUT_OPTION, dynamodb_budget, timeout_from
from . import setup_table
from .leases import Leases
from .queue import DynamoDBQueue
from .semaphores import Semaphores
from .table import MAX_CONCURRENT_WRITES, Table

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


def _check_shards(value: object) -> int:
    try:
        shards = int(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else None
    except ValueError:
        shards = None
    if shards is None or not 1 <= shards <= MAX_SHARDS:
        raise ConfigError(f"dynamodb option shards must be an integer from 1 to {MAX_SHARDS}, got {value!r}")
    return shards


def _check_clock_skew(value: object) -> float:
    try:
        skew = float(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) else None
    except ValueError:
        skew = None
    if skew is None or not 0 <= skew <= MAX_CLOCK_SKEW:
        raise ConfigError(f"dynamodb option {CLOCK_SKEW_OPTION} must be seconds from 0 to {MAX_CLOCK_SKEW:g},"
                          f" got {value!r}")
    return skew


def _check_table(table: object) -> str:
    if not isinstance(table, str) or not TABLE_NAME.match(table):
        raise ConfigError(
            f"dynamodb table name must be 3-255 characters of A-Z a-z 0-9 _ . -, got {table!r}"
        )
    return table


def _check_endpoint(endpoint_url: str) -> str:
    parts = urlsplit(endpoint_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"dynamodb option endpoint_url must be an http(s) URL, got {endpoint_url!r}")
    return endpoint_url


def _client_config(timeout: float) -> Config:
    """Timeouts and retries sized so that one request, retries and backoff
    included, fails within ``timeout`` seconds (see timeouts.dynamodb_budget)."""
    attempts, connect, read = dynamodb_budget(timeout)
    return Config(
        connect_timeout=connect,
        read_timeout=read,
        retries={"mode": "standard", "total_max_attempts": attempts},
        max_pool_connections=2 * MAX_CONCURRENT_WRITES,
    )


class DynamoDBStore(Leases, Semaphores):
    """Leases and queues on one DynamoDB table. Pass your own boto3 DynamoDB
    client (built once per warm container) or build one with :meth:`from_url`.
    Raises StoreNotReadyError when the table is missing, StoreUnavailableError
    when DynamoDB cannot be reached or answers with an error.

    Every call but setup() ends within ``timeout`` seconds, however many
    requests it sends (see table.Table.run)."""

    kind = "dynamodb"

    def __init__(
        self, client: Any, table: str, shards: int = DEFAULT_SHARDS, *, owns_client: bool = False,
        clock: Callable[[], float] = time.time, timeout: float = DEFAULT_TIMEOUT,
        clock_skew: float = DEFAULT_CLOCK_SKEW,
    ) -> None:
        self._client = client
        # Every "now" of this store (DynamoDB has no server clock): epoch seconds.
        self.clock = clock
        # How far apart the clients' clocks may be: a heartbeat counts its
        # lease as ended this much early (onceonly.heartbeat).
        self.clock_skew = _check_clock_skew(clock_skew)
        self.table = _check_table(table)
        self.shards = _check_shards(shards)
        self.timeout = common.check_seconds(timeout, "timeout")
        self._table = Table(client, self.table, self.timeout, owns_client=owns_client)

    @classmethod
    def from_url(
        cls, table: str, options: Mapping[str, str], *, clock: Callable[[], float] = time.time
    ) -> DynamoDBStore:
        """Build the store for ``dynamodb://TABLE?region=…&endpoint_url=…&shards=8&timeout=10&clock_skew=1``;
        ``options`` are the URL's query parameters; ``timeout`` (seconds) bounds
        each call, however many requests it sends. Raises ConfigError for an
        unknown or bad option, or when no region is given or configured."""
        unknown = sorted(set(options) - set(URL_OPTIONS))
        if unknown:
            raise ConfigError(
                f"unknown dynamodb option(s) {', '.join(unknown)}; expected {', '.join(URL_OPTIONS)}"
            )
        region = options.get("region")
        if region is not None and not region.strip():
            raise ConfigError("dynamodb option region must not be empty")
        endpoint_url = options.get("endpoint_url")
        if endpoint_url is not None:
            endpoint_url = _check_endpoint(endpoint_url)
        shards = _check_shards(options.get("shards", DEFAULT_SHARDS))
        clock_skew = _check_clock_skew(options.get(CLOCK_SKEW_OPTION, DEFAULT_CLOCK_SKEW))
        table = _check_table(table)
        timeout = timeout_from(options)
        try:
            client = boto3.session.Session().client(
                "dynamodb", region_name=region, endpoint_url=endpoint_url, config=_client_config(timeout)
            )
        except NoRegionError as exc:
            raise ConfigError(
                "dynamodb store needs a region: add ?region=… to the URL or set AWS_DEFAULT_REGION"
            ) from exc
        except BotoCoreError as exc:
            raise ConfigError(f"dynamodb option region or endpoint_url refused by botocore: {exc}") from exc
        return cls(client, table, shards, owns_client=True, clock=clock, timeout=timeout, clock_skew=clock_skew)

    def setup(self) -> None:
        """Create the table and its ``due`` GSI if missing, wait until they are
        ACTIVE, and turn on TTL by ``expire_at``. Idempotent, and safe when several
        processes call it at once."""
        setup_table.setup(self._table)

    def queue(self, name: str) -> DynamoDBQueue:
        return DynamoDBQueue(self, common.check_name(name, "queue name"))

    def close(self) -> None:
        self._table.close()
