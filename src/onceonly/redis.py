"""The Redis store, for building one around a client of your own
(``RedisStore(redis.Redis(...), prefix=…)``). Importing this module imports
redis-py (the ``redis`` extra); ``import onceonly`` does not."""

from __future__ import annotations

from .stores.redis.queue import RedisQueue
from .stores.redis.store import RedisStore

__all__ = ["RedisQueue", "RedisStore"]
