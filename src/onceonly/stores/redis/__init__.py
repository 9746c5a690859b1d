"""Redis store (redis-py; imported only when a ``redis://`` or ``rediss://``
store is connected). The modules, one job each:

- ``store``: :class:`RedisStore`, leases and counting semaphores, and the one
  place that runs a script (durable mode, the eviction check);
- ``queue``: :class:`RedisQueue`, a due queue, run through the store's
  script runner;
- ``options``: the URL's options, onceonly's and the redis-py ones passed on;
  any other is refused;
- ``errors``: redis-py's exceptions -> onceonly errors;
- ``scripts``: the Lua scripts as sent; ``lua/``: one file per operation,
  ``common.lua`` (shared helpers) and ``eviction_guard.lua``;
- ``units``: milliseconds and reply text;
- ``endpoint``: a URL -> one node or a cluster; ``nodes``: one node, each
  call sent once; ``cluster``: a Redis Cluster, redirects followed only
  where nothing ran.
"""

from .queue import RedisQueue
from .scripts import SCRIPT_NAMES, SCRIPT_SOURCES, script_file
from .store import RedisStore

__all__ = ["SCRIPT_NAMES", "SCRIPT_SOURCES", "RedisQueue", "RedisStore", "script_file"]
