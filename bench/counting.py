"""Round trips counted on the client, in each worker process:

- PostgreSQL: every ``psycopg.Connection.wait`` that waits for the server's
  reply (a statement, a pipeline of statements up to its sync, or the pool's
  check of a connection on checkout; not a COMMIT that psycopg skips because
  autocommit left nothing open);
- Redis: every ``send_packed_command`` of a redis-py connection (one write of
  one command or one pipeline, whose replies are then read);
- DynamoDB: botocore's ``before-call`` event on the client (one API call;
  retries would add HTTP requests, not calls).

``ROUND_TRIPS`` only grows; a caller reads it before and after what it measures."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

ROUND_TRIPS = 0
_installed = False


def _count() -> None:
    global ROUND_TRIPS
    ROUND_TRIPS += 1


def _counted(gen: Generator[Any, Any, Any]) -> Generator[Any, Any, Any]:
    """Pass a psycopg wait generator through, counting it once if it waits to
    read the server's reply. Waits that only send are not round trips: in
    pipeline mode psycopg sends each statement and the sync in waits of their
    own (read or write), then reads every reply in one wait that reads only."""
    counted = False
    try:
        request = next(gen)
    except StopIteration as stop:
        return stop.value
    while True:
        if not counted and _reads_only(request):
            _count()
            counted = True
        reply = yield request
        try:
            request = gen.send(reply)
        except StopIteration as stop:
            return stop.value


def _reads_only(request: Any) -> bool:
    from psycopg.waiting import Wait

    wait = request[1] if isinstance(request, tuple) else request
    return int(wait) == int(Wait.R)


def install() -> None:
    """Wrap the psycopg and redis-py methods that send to the server (once per process)."""
    global _installed
    if _installed:
        return
    _installed = True
    import psycopg
    import redis.connection

    wait = psycopg.Connection.wait

    def counted_wait(self: Any, gen: Any, *args: Any, **kwargs: Any) -> Any:
        return wait(self, _counted(gen), *args, **kwargs)

    send = redis.connection.AbstractConnection.send_packed_command

    def counted_send(self: Any, *args: Any, **kwargs: Any) -> Any:
        _count()
        return send(self, *args, **kwargs)

    psycopg.Connection.wait = counted_wait  # type: ignore[method-assign]
    redis.connection.AbstractConnection.send_packed_command = counted_send  # type: ignore[method-assign]


def count_calls(client: Any) -> Any:
    """Count every API call of a boto3 client; returns the client."""
    client.meta.events.register("before-call", lambda **_: _count())
    return client
