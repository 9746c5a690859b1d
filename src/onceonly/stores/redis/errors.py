"""redis-py's exceptions -> onceonly errors (see :mod:`onceonly.stores.errors`)."""

from __future__ import annotations

import redis

from ...errors import ConfigError, OnceOnlyError, StoreUnavailableError
from .nodes import certificate_refused


def translate(exc: BaseException, what: str) -> OnceOnlyError | None:
    """The onceonly error for a redis-py error during ``what``; None for any other exception."""
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)) and certificate_refused(str(exc)):
        return ConfigError(
            f"the Redis server's TLS certificate was not verified ({exc}): give the CA bundle that signed"
            " it with ssl_cert_reqs left on, e.g. rediss://HOST:PORT?ssl_ca_certs=/path/ca.pem")
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return StoreUnavailableError(f"Redis store unreachable during {what}: {exc}")
    if isinstance(exc, redis.RedisError):
        return StoreUnavailableError(f"Redis store error during {what}: {exc}")
    return None
