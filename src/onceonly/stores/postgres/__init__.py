"""PostgreSQL store (psycopg 3 and psycopg_pool; imported only when a
``postgresql://`` store is connected). The modules, one job each:

- ``store``: :class:`PostgresStore`, leases and counting semaphores, and the
  one place that runs a named statement;
- ``queue``: :class:`PostgresQueue`, a due queue, run through the store's
  statement runner;
- ``options``: the URL's options, onceonly's and the libpq keywords passed
  on; any other is refused;
- ``errors``: psycopg's exceptions -> onceonly errors;
- ``pool``: pools that never hang (every wait bounded), also the reference
  app's domain database pool (public as ``onceonly.postgres``);
- ``connection``: how each connection behaves (reply bounds, fail-fast
  refusals, secret refresh, prepared statements);
- ``sql/store.sql``: every statement, by name.
"""

from .queue import PostgresQueue
from .store import PLAN_SETTINGS, PRUNE_PER_COMPLETE, SQL, PostgresStore

__all__ = ["PLAN_SETTINGS", "PRUNE_PER_COMPLETE", "SQL", "PostgresQueue", "PostgresStore"]
