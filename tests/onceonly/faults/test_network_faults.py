"""Scenario 3: the link between the workers and the store misbehaves (through
tests/support/servers/faultproxy.py): connections dropped, every chunk late, black
holes (nothing answers, nothing closes) and replies lost after the store
applied the request. Claims stay single, every call ends within the store's
bound (no hang), nothing is lost."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.onceonly.faults.harness import Fleet, Plan, assert_sound, record, run
from tests.onceonly.faults.sizes import STORES, sized, sizes
from tests.support.servers.faultproxy import FaultProxy

STORE_TIMEOUT = 2.0  # ?timeout= of the workers' URL: every call ends within it
CALL_DEADLINE = 10.0  # a handler's deadline: no store call or POST may take longer


KINDS = ["drop", "latency", "black hole", "lost replies"]


class LinkFaults:
    """One episode: a fault on the link for a moment, then a clean link. Every
    four episodes bring each kind once, in a random order."""

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        self.next: list[str] = []

    def inject(self, rng: random.Random, fleet: Fleet) -> str:
        if not self.next:
            self.next = rng.sample(KINDS, len(KINDS))
        kind = self.next.pop()
        if kind == "drop":
            self.proxy.drop()
        elif kind == "latency":
            self.proxy.delay(rng.uniform(0.05, 0.3))
        elif kind == "black hole":
            self.proxy.blackhole()
        else:
            self.proxy.lose_replies()
        time.sleep(rng.uniform(0.3, 2.0))
        self.proxy.passthrough()
        return kind


def _through(url: str, proxy_port: int) -> tuple[str, int]:
    """``url`` pointed at the proxy, and the port the proxy forwards to."""
    if url.startswith("dynamodb://"):
        endpoint = url.split("endpoint_url=")[1].split("&")[0]
        port = urlsplit(endpoint).port
        assert port is not None
        return url.replace(endpoint, f"http://127.0.0.1:{proxy_port}") + f"&timeout={STORE_TIMEOUT:g}", port
    parts = urlsplit(url)
    assert parts.port is not None and parts.hostname == "127.0.0.1", url
    joined = "&" if parts.query else "?"
    proxied = parts._replace(netloc=parts.netloc.replace(f":{parts.port}", f":{proxy_port}")).geturl()
    return f"{proxied}{joined}timeout={STORE_TIMEOUT:g}", parts.port


@pytest.mark.concurrency
@pytest.mark.parametrize("kind", STORES)
@sizes(quick={"processes": 3, "items": 80, "dynamodb_items": 40, "ticks": 3, "faults": 4},
       soak={"processes": 8, "items": 2000, "dynamodb_items": 800, "ticks": 20, "faults": 16, "deadline": 1400.0})
def test_network_faults(kind: str, size: dict[str, Any], tmp_path: Path, request: pytest.FixtureRequest) -> None:
    direct = str(request.getfixturevalue(f"{kind}_url"))
    target = _through(direct, 0)[1]
    with FaultProxy(target_port=target) as proxy:
        url, _ = _through(direct, proxy.port)
        plan = Plan(scenario="network faults", store=kind, url=url, check_url=direct, lease=5.0, tick_ttl=6.0,
                    **sized(size, kind))
        result = run(plan, tmp_path, LinkFaults(proxy))
    record(result)
    assert_sound(result)
    assert result["longest_call"] <= CALL_DEADLINE, f"a call took {result['longest_call']}s"
