"""The benchmark suite counts round trips on the client (bench/counting.py):
one per exchange that reached the server, none for a call that sent nothing.
Checked in a bench worker process, where the hooks are installed, so this
test process's drivers stay unpatched."""

from __future__ import annotations

import pytest

from bench.pool import Workers

pytestmark = [pytest.mark.bench, pytest.mark.xdist_group("processes")]  # spawns processes


def test_round_trips_are_exchanges_with_the_server(postgres_url: str, redis_server_url: str,
                                                   dynalite_endpoint: str) -> None:
    workers = Workers(1)
    try:
        result = workers.run("tests.bench.smoke.counting_probe:probe", {
            "postgres_url": postgres_url, "redis_url": redis_server_url, "dynalite_endpoint": dynalite_endpoint})
    finally:
        workers.close()
    assert result["seen"] == {
        "pg statement": 1,
        "pg commit with nothing open": 0,
        "pg pipeline of two, one sync": 1,  # each statement is sent in a wait of its own, the replies read in one
        "redis command": 1,
        "redis pipeline of three": 1,
        "dynamodb call": 1,
    }
