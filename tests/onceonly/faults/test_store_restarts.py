"""Scenario 2: the store itself goes away mid-run and comes back, on the same
address and data: Redis with its AOF (``appendonly yes``, fsync always) SIGKILLed
and restarted; PostgreSQL's backends terminated (pg_terminate_backend) and the
whole cluster stopped immediately and restarted; dynalite with ``--path``
stopped (SIGTERM: a SIGKILL tears dynalite's own item + index writes, which
DynamoDB does not have) and restarted. The workers back off, reconnect and go on: nothing is
lost, nothing is granted twice."""

from __future__ import annotations

import random
import secrets
from pathlib import Path
from typing import Any

import pytest

from tests.onceonly.faults.harness import Fleet, Plan, assert_sound, record, run
from tests.onceonly.faults.sizes import STORES, sized, sizes
from tests.support.servers.restartable_servers import PostgresCluster, own_server

DOWNTIME = (0.2, 1.5)  # seconds the store is away in one episode


class StoreRestart:
    """PostgreSQL: backends terminated and full restarts, in turn; the others: restarts."""

    def __init__(self, server: Any) -> None:
        self.server, self.episodes = server, 0

    def inject(self, rng: random.Random, fleet: Fleet) -> str:
        self.episodes += 1
        if isinstance(self.server, PostgresCluster) and self.episodes % 2:
            self.server.terminate_backends()
            return "pg_terminate_backend"
        return str(self.server.restart(rng.uniform(*DOWNTIME)))


def _url(kind: str, server: Any) -> str:
    if kind == "postgres":
        return f"{server.url()}&timeout=2"
    if kind == "redis":
        return f"{server.url}?timeout=2"
    return f"dynamodb://faults-{secrets.token_hex(4)}?region=us-east-1&endpoint_url={server.endpoint}&timeout=2"


@pytest.mark.concurrency
@pytest.mark.parametrize("kind", STORES)
@sizes(quick={"processes": 3, "items": 80, "dynamodb_items": 40, "ticks": 3, "faults": 2},
       soak={"processes": 8, "items": 2000, "dynamodb_items": 800, "ticks": 20, "faults": 8, "deadline": 1400.0})
def test_store_restarts(kind: str, size: dict[str, Any], tmp_path: Path) -> None:
    with own_server(kind) as server:
        plan = Plan(scenario="store restart", store=kind, url=_url(kind, server), **sized(size, kind))
        result = run(plan, tmp_path, StoreRestart(server))
    record(result)
    assert_sound(result)
