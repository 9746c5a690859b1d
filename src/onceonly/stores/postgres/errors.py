"""psycopg's exceptions -> onceonly errors (see :mod:`onceonly.stores.errors`)."""

from __future__ import annotations

import psycopg
import psycopg_pool

from ...errors import OnceOnlyError, StoreNotReadyError, StoreRefusedError, StoreUnavailableError
from .connection import ConnectionRefusedByServer


def translate(exc: BaseException, what: str) -> OnceOnlyError | None:
    """The onceonly error for a psycopg or pool error during ``what``; None for any other exception."""
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return StoreNotReadyError(
            f"PostgreSQL store: table missing during {what}; run store.setup() ({exc.diag.message_primary})")
    if isinstance(exc, ConnectionRefusedByServer):
        return StoreRefusedError(f"PostgreSQL store: {exc}")
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return StoreUnavailableError(f"PostgreSQL store unreachable during {what}: {exc}")
    if isinstance(exc, psycopg.Error):
        return StoreUnavailableError(f"PostgreSQL store error during {what}: {exc}")
    return None
