"""DynamoDBStore: built from a URL or around your own client; leases come from
leases.py, counting semaphores from semaphores.py, queues from queue.py,
requests go through table.py."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, NoRegionError

from ...errors import ConfigError
from .. import _common as common
from ..timeouts import DEFAULT_TIMEOUT, dynamodb_budget, timeout_from
from . import setup_table
from .leases import Leases
from .options import (
    CLOCK_SKEW_OPTION,
    DEFAULT_CLOCK_SKEW,
    DEFAULT_SHARDS,
    check_clock_skew,
    check_endpoint,
    check_options,
    check_shards,
    check_table,
)
from .queue import DynamoDBQueue
from .semaphores import Semaphores
from .table import MAX_CONCURRENT_WRITES, Table


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
        self.clock_skew = check_clock_skew(clock_skew)
        self.table = check_table(table)
        self.shards = check_shards(shards)
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
        check_options(options)
        region = options.get("region")
        if region is not None and not region.strip():
            raise ConfigError("dynamodb option region must not be empty")
        endpoint_url = options.get("endpoint_url")
        if endpoint_url is not None:
            endpoint_url = check_endpoint(endpoint_url)
        shards = check_shards(options.get("shards", DEFAULT_SHARDS))
        clock_skew = check_clock_skew(options.get(CLOCK_SKEW_OPTION, DEFAULT_CLOCK_SKEW))
        table = check_table(table)
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
        return DynamoDBQueue(self._table, self.clock, self.shards, common.check_name(name, "queue name"))

    def close(self) -> None:
        self._table.close()
