"""Store URLs -> stores. Only the driver of the chosen scheme is imported, so a
Lambda on Redis never pays for importing psycopg or boto3: each adds tens to
hundreds of milliseconds to a cold start."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qsl, urlsplit

from .api import Store
from .errors import ConfigError

SCHEMES = ("postgresql", "postgres", "redis", "rediss", "dynamodb")


def connect(url: str, *, refresh_url: Callable[[], str] | None = None) -> Store:
    """Open a store from a URL:

    - ``postgresql://user@host:5432/db`` (psycopg 3 pool; ``?pool_mode=transaction``
      behind a transaction pooler such as PgBouncer or Supavisor, implied by an
      RDS Proxy host: no prepared statements, no session state)
    - ``redis://host:6379/0`` or ``rediss://…`` (redis-py; ``?prefix=`` changes the key
      prefix, ``?wait_replicas=1&wait_timeout_ms=500`` turns on durable mode; a server
      whose ``maxmemory-policy`` is not ``noeviction`` is refused with ConfigError
      unless ``?allow_eviction=1``; ``?cluster=1`` for a Redis Cluster such as
      ElastiCache Serverless, ``rediss://…?ssl_ca_certs=PATH`` for a private CA)
    - ``dynamodb://TABLE?region=us-east-1&endpoint_url=http://127.0.0.1:4567&shards=8``
      (``&clock_skew=1``: the seconds its clients' clocks may be apart, taken
      off every lease end a heartbeat counts; 1 by default)

    Every scheme takes ``?timeout=SECONDS`` (default 10): an operation on a store
    that stops answering raises StoreUnavailableError within it.

    ``refresh_url`` (optional, PostgreSQL) returns the URL with fresh credentials,
    e.g. re-read from Secrets Manager: it is called once when the server refuses
    the credentials (a rotated password), and the connection is retried once.

    Surrounding whitespace (a trailing newline) is ignored. Raises ConfigError for
    a malformed URL, an unknown scheme, and any option the store does not
    accept or a bad value of one, naming it (the table: docs/coordination.md,
    "Store URL options"). Connections are opened lazily; an
    unreachable server surfaces as StoreUnavailableError on first use.
    """
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"store URL must be a non-empty string, got {url!r}")
    # Secrets Manager values and env files often end in a newline.
    url = url.strip()
    try:
        parts = urlsplit(url)
        options = dict(parse_qsl(parts.query, keep_blank_values=True))
        parts.port  # noqa: B018 - raises ValueError on a non-numeric port
    except ValueError as exc:
        raise ConfigError(f"malformed store URL {url!r}: {exc}") from exc
    scheme = parts.scheme.lower()
    if scheme in ("postgresql", "postgres"):
        from .stores.postgres import PostgresStore

        return PostgresStore.from_url(url, refresh_url=refresh_url)
    if scheme in ("redis", "rediss"):
        from .stores.redis import RedisStore

        return RedisStore.from_url(url)
    if scheme == "dynamodb":
        from .stores.dynamodb import DynamoDBStore

        if not parts.netloc:
            raise ConfigError(f"dynamodb URL needs a table name: dynamodb://TABLE?region=…, got {url!r}")
        if parts.path not in ("", "/") or parts.fragment:
            raise ConfigError(f"dynamodb URL is dynamodb://TABLE?options, with no path or #fragment, got {url!r}")
        return DynamoDBStore.from_url(parts.netloc, options)
    raise ConfigError(f"unknown store scheme {parts.scheme!r} in {url!r}; expected one of {', '.join(SCHEMES)}")
