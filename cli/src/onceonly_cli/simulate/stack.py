"""The servers a simulation runs against, started and stopped together:
PostgreSQL (embedded by default; the run's own database on it holds the domain
data and, unless --store says otherwise, the coordination store), the store's
stand-in for a store keyword, the webhook receiver, the fake payments API, and
moto's server for the AWS calls the jobs make (SES, SQS), all on 127.0.0.1."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CliError
from ..local.scratch import redis_cluster_url
from ..local.stores import check_database, migrate_database, open_store
from ..testing.servers import LocalServers, ServerSetupError
from ..testing.standins import start_standin, store_keyword
from .run_scope import run_database, run_store


@dataclass
class Stack:
    database_url: str
    store_url: str
    embedded_database: bool
    work_dir: Path
    servers: LocalServers
    receiver: Any  # receiver.WebhookReceiver
    payments: Any  # fake_payments.FakePayments: the payments API the watcher polls
    aws_endpoint: str = ""  # moto's server, for the jobs' SES and SQS calls
    _closers: list[Any] = field(default_factory=list)

    @property
    def store_kind(self) -> str:
        kind = self.store_url.split(":", 1)[0]
        if kind in ("redis", "rediss") and redis_cluster_url(self.store_url):
            return "redis-cluster"
        return kind

    def close(self) -> None:
        """Stop everything this stack started, newest first; never raises."""
        for close in reversed(self._closers):
            with contextlib.suppress(Exception):
                close()
        self._closers.clear()
        self.servers.stop()


def start_stack(database: str | None, store: str | None, run_id: str) -> Stack:
    """``store``: None or ``postgresql`` (the run's database), ``redis`` or
    ``dynamodb`` (a fresh local stand-in), or a URL; narrowed to the run either way."""
    from ..testing.fake_payments import FakePayments
    from ..testing.receiver import WebhookReceiver

    servers = LocalServers()
    work = servers.tempdir("onceonly-simulate-")  # replica logs; removed with the servers
    closers: list[Any] = []
    try:
        embedded = database is None
        try:
            server_url = servers.postgres(database, embedded=True)
        except ServerSetupError as exc:
            raise CliError(str(exc)) from None
        check_database(server_url)
        database_url = run_database(server_url, run_id, closers)
        kind = store_keyword(store)
        if store is None or store == database or kind == "postgresql":
            store_url = database_url
        else:
            base = start_standin(kind, servers, database_url) if kind else store
            store_url = run_store(base, run_id, closers)
        migrate_database(database_url)
        open_store(store_url, setup=True).close()
        # quiet: SIGKILLed replicas reset their connections, which would print
        # tracebacks over the progress bars.
        receiver = WebhookReceiver(quiet=True).start()
        closers.append(receiver.stop)
        payments = FakePayments()
        payments.start()
        closers.append(payments.stop)
        stack = Stack(database_url, store_url, embedded, work, servers, receiver, payments,
                      _closers=closers)
        stack.aws_endpoint = servers.moto()
        return stack
    except BaseException:
        for close in reversed(closers):
            with contextlib.suppress(Exception):
                close()
        servers.stop()
        raise
