"""redis-py's exceptions -> onceonly errors (see :mod:`onceonly.stores.errors`)."""

from __future__ import annotations

import redis

from ...errors import OnceOnlyError, StoreUnavailableError


def translate(exc: BaseException, what: str) -> OnceOnlyError | None:
    """The onceonly error for a redis-py error during ``what``; None for any other exception."""
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return StoreUnavailableError(f"Redis store unreachable during {what}: {exc}")
    if isinstance(exc, redis.RedisError):
        return StoreUnavailableError(f"Redis store error during {what}: {exc}")
    return None
