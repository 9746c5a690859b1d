"""Where one suite run writes: a scratch PostgreSQL database, a scratch Redis
key prefix and DynamoDB tables on a dynalite started for the run. All on
127.0.0.1, never the default database; everything is removed at the end."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from onceonly_cli.local.scratch import redis_prefix, scratch_database, scratch_redis_prefix
from onceonly_cli.testing.servers import LocalServers


@dataclass(frozen=True)
class Places:
    postgres_url: str  # the scratch database
    postgres_server_url: str  # the server's default database: read-only here (version)
    redis_url: str  # a store URL with the scratch prefix
    redis_server_url: str  # the plain server URL, for raw clients
    dynalite_endpoint: str
    run_id: str

    @property
    def redis_prefix(self) -> str:
        return str(redis_prefix(self.redis_url))

    def dynamodb_url(self, table: str) -> str:
        return f"dynamodb://{table}?region=us-east-1&endpoint_url={self.dynalite_endpoint}"

    def store_urls(self) -> dict[str, str]:
        """onceonly's store URL per store kind (the DynamoDB table is created by setup())."""
        return {"postgresql": self.postgres_url, "redis": self.redis_url,
                "dynamodb": self.dynamodb_url(f"onceonly-bench-{self.run_id}")}


def use_local_credentials() -> None:
    """dynalite ignores credentials but boto3 wants some: never real ones here."""
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "POWERTOOLS_IDEMPOTENCY_DISABLED"):
        os.environ.pop(name, None)


@contextmanager
def scratch_places() -> Iterator[Places]:
    use_local_credentials()
    run_id = secrets.token_hex(3)
    with ExitStack() as stack:
        servers = LocalServers()
        stack.callback(servers.stop)
        postgres_server = servers.postgres()
        redis_server = servers.redis()
        endpoint = servers.dynalite()  # stopped with its tables at the end
        postgres_url = stack.enter_context(scratch_database(postgres_server, "onceonly_bench"))
        redis_url = stack.enter_context(scratch_redis_prefix(redis_server, "onceonly-bench"))
        yield Places(postgres_url, postgres_server, redis_url, redis_server, endpoint, run_id)
