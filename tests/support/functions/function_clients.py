"""Open a function's clients before a race, as a warm Lambda container has them.

The handlers build their clients lazily (onceonly_app.db.clients: the domain
database pool and the coordination store). A replica that connects only after
the barrier may start so late that the others are done: the race would not
happen. One real round trip on each client opens its connection beforehand."""

from __future__ import annotations


def open_function_clients() -> None:
    from onceonly_app.db import clients
    from tests.support.races.race import PING

    clients.coordination_store().inspect(PING)
    with clients.db_pool().connection() as conn:
        conn.execute("SELECT 1")
