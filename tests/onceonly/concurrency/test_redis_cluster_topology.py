"""The claim race and the lease race on a real Redis Cluster whose topology
changes mid-run: the queue's (or the leases') slot migrated live to another
primary and back, key by key (clients get ASK, TRYAGAIN, then MOVED), and a
failover, graceful (CLUSTER FAILOVER) or by SIGKILL of the primary. Six OS
processes race, each connected before the start line; the histories are
checked afterwards: 0 duplicates, 0 lost, tokens increasing in grant order,
never two holders at once, stale acks refused. Each test has a cluster of its
own (3 primaries, 3 replicas, loopback), stopped by PID."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import onceonly
from onceonly_cli.testing.redis_cluster import LocalCluster
from onceonly_cli.testing.servers import LocalServers
from tests.onceonly.concurrency import cluster_workers
from tests.support.races.lease_history import check_holdings
from tests.support.races.race import run_workers
from tests.support.servers.redis_cluster_ops import fail_over, migrate_slot, owner_port, redirects_seen, slot_of

pytestmark = [pytest.mark.concurrency, pytest.mark.processes]
WORKERS = 6
LEASE = 2.0
# Grant times come from the nodes' clocks (all this machine's), in whole ms.
CLOCK_SLACK = 0.002


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    servers = LocalServers()
    try:
        yield servers.redis_cluster()
    finally:
        servers.stop()


class Change(threading.Thread):
    """Runs ``change`` once the workers are racing (their histories have
    events), records when it ran, and then leaves the file ``done`` (the
    queue workers run on until it is there)."""

    def __init__(self, history_dir: Path, change: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self._dir, self._change = history_dir, change
        self.started_at = self.ended_at = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 120
            while not any(p.stat().st_size > 2000 for p in self._dir.glob("*.jsonl")):
                assert time.monotonic() < deadline, "the workers never started"
                time.sleep(0.01)
            self.started_at = time.time()
            self._change()
            self.ended_at = time.time()
        except BaseException as exc:  # reported by the test thread
            self.error = exc
        finally:
            done_marker(self._dir).touch()


def done_marker(history_dir: Path) -> Path:
    return history_dir / "change.done"


class Producer(threading.Thread):
    """Puts new items while the topology changes (so that claims meet every
    step of it), until ``stop`` is set. A put that failed may or may not have
    been applied: its items are ``maybe``, the others ``put``."""

    def __init__(self, url: str, queue: str) -> None:
        super().__init__(daemon=True)
        self._store, self._queue = onceonly.connect(url), queue
        self.stop = threading.Event()
        self.put: list[str] = []
        self.maybe: list[str] = []

    def run(self) -> None:
        batch = 0
        while not self.stop.is_set():
            ids = [f"more-{batch:04d}-{i}" for i in range(10)]
            try:
                self._store.queue(self._queue).put_many((item, None, None) for item in ids)
                self.put.extend(ids)
            except onceonly.StoreUnavailableError:
                self.maybe.extend(ids)
            batch += 1
            time.sleep(0.05)
        self._store.close()


def race_during(history_dir: Path, change: Callable[[], Any], target: Callable[..., None], *args: Any,
                won: Callable[[dict[str, Any]], bool]) -> tuple[list[dict[str, Any]], Change]:
    history_dir.mkdir(parents=True, exist_ok=True)
    changer = Change(history_dir, change)
    changer.start()
    events = run_workers(target, WORKERS, history_dir, *args, won=won, timeout=180)
    changer.join(60)
    assert changer.error is None, f"the topology change failed: {changer.error!r}"
    assert changer.ended_at, "the topology change never ran"
    return events, changer


def check_queue_history(events: list[dict[str, Any]], items: list[str], store: onceonly.Store, queue: str,
                        changer: Change, maybe: frozenset[str] = frozenset()) -> None:
    """``items`` were put; ``maybe`` were in a put that failed (applied or not)."""
    claims, acks = defaultdict(list), defaultdict(list)
    unknown = defaultdict(list)
    for e in events:
        if e["event"] == "claim":
            claims[e["item"]].append(e)
        elif e["event"] == "ack":
            acks[e["item"]].append(e)
        elif e["event"] == "ack_unknown":
            unknown[e["item"]].append(e)
    assert store.queue(queue).depth().total == 0, "items left in the queue"
    assert set(items) <= set(claims) <= set(items) | maybe, "an item was never claimed (lost), or never put"
    for item, grants in claims.items():
        tokens = [g["token"] for g in grants]
        assert len(tokens) == len(set(tokens)), f"{item}: a token was granted twice: {tokens}"
        by_time = sorted(grants, key=lambda g: g["granted_at"])
        assert [g["token"] for g in by_time] == sorted(tokens), f"{item}: tokens not increasing in grant order"
        for earlier, later in zip(by_time, by_time[1:], strict=False):
            assert later["granted_at"] >= earlier["expires"] - CLOCK_SLACK, f"{item}: two holders at once"
        newest = max(tokens)
        ok = [a for a in acks[item] if a["ok"]]
        assert len(ok) <= 1, f"{item}: acked twice (a duplicate): {ok}"
        assert all(a["token"] == newest for a in ok), f"{item}: a stale ack was accepted"
        assert ok or unknown[item], f"{item}: never acked and not in the queue"
    refused = [a for item_acks in acks.values() for a in item_acks if not a["ok"]]
    assert refused, "no stale ack happened: reclaim was not exercised"
    during = [g for gs in claims.values() for g in gs if changer.started_at < g["granted_at"] < changer.ended_at]
    assert len(during) >= 10, f"only {len(during)} grants while the topology changed: not mid-run"


def check_lease_history(events: list[dict[str, Any]], changer: Change) -> None:
    held = check_holdings(events)
    assert len(held) >= 20, "too few grants to say anything"
    # Mid-run: the workers held names before the change and went on after it (a
    # graceful failover pauses writes for most of its window, so few grants fall
    # inside it on a loaded machine).
    before = [h for h in held if h["start"] < changer.started_at]
    after = [h for h in held if h["start"] > changer.ended_at]
    assert len(before) >= 10 and len(after) >= 10, (
        f"{len(before)} grants before the topology change and {len(after)} after it: not mid-run")


def _queue_race(cluster: LocalCluster, tmp_path: Path, unique: str, change: Callable[[str], Any],
                query: str = "") -> tuple[list[dict[str, Any]], onceonly.Store, list[str], Change, frozenset[str]]:
    """The workers drain the queue until it is empty and the change is done;
    items are put before and while it happens. (events, store, items put,
    the change, items maybe put)."""
    url = f"{cluster.url}&prefix={unique}{query}"
    store = onceonly.connect(url)
    items = [f"item-{i:04d}" for i in range(300)]
    store.queue(unique).put_many((item, None, {"i": item}) for item in items)
    key = f"{unique}:{{q:{unique}}}:sched"
    producer = Producer(url, unique)

    def change_while_producing() -> None:
        producer.start()
        try:
            change(key)
        finally:
            producer.stop.set()
            producer.join(30)

    history = tmp_path / "history"
    events, changer = race_during(
        history, change_while_producing, cluster_workers.drain_through_changes,
        url, unique, LEASE, 120, str(done_marker(history)), won=lambda e: e["event"] == "claim")
    return events, store, items + producer.put, changer, frozenset(producer.maybe)


def _lease_race(cluster: LocalCluster, tmp_path: Path, unique: str, change: Callable[[list[str]], Any],
                query: str = "") -> tuple[list[dict[str, Any]], Change]:
    url = f"{cluster.url}&prefix={unique}{query}"
    names = [f"hot-{i}" for i in range(3)]
    keys = [f"{unique}:{{lease:{name}}}" for name in names]
    history = tmp_path / "history"
    events, changer = race_during(
        history, lambda: change(keys), cluster_workers.hold_names_through_changes,
        url, names, 5.0, 3.0, str(done_marker(history)), 120, won=lambda e: e["event"] == "held")
    return events, changer


def _back_and_forth(cluster: LocalCluster, keys: list[str]) -> None:
    """Each key's slot to another primary and back, twice, key by key with pauses."""
    for _ in range(2):
        for key in keys:
            slot = slot_of(cluster, key)
            home = owner_port(cluster, slot)
            away = next(n.port for n in cluster.primaries() if n.port != home)
            migrate_slot(cluster, slot, away, pause=0.5)
            migrate_slot(cluster, slot, home, pause=0.5)


def test_claims_through_resharding(cluster: LocalCluster, tmp_path: Path, unique: str) -> None:
    events, store, items, changer, maybe = _queue_race(cluster, tmp_path, unique,
                                                       lambda key: _back_and_forth(cluster, [key]))
    check_queue_history(events, items, store, unique, changer, maybe)
    seen = redirects_seen(cluster)
    assert seen["ASK"] + seen["TRYAGAIN"] > 0 and seen["MOVED"] > 0, f"no client met the migration: {seen}"
    # every redirect was followed: no call failed
    assert [e for e in events if e["event"] == "error"] == []
    store.close()


def test_leases_through_resharding(cluster: LocalCluster, tmp_path: Path, unique: str) -> None:
    events, changer = _lease_race(cluster, tmp_path, unique, lambda keys: _back_and_forth(cluster, keys))
    check_lease_history(events, changer)
    seen = redirects_seen(cluster)
    assert seen["ASK"] > 0 and seen["MOVED"] > 0, f"no client met the migration: {seen}"
    assert [e for e in events if e["event"] == "error"] == []


def test_claims_and_leases_through_a_graceful_failover(cluster: LocalCluster, tmp_path: Path, unique: str) -> None:
    """CLUSTER FAILOVER waits for the replica to catch up: nothing
    acknowledged is lost, without durable mode."""
    def fail_over_owner(key: str) -> None:
        fail_over(cluster, owner_port(cluster, slot_of(cluster, key)), kill=False)

    events, store, items, changer, maybe = _queue_race(cluster, tmp_path / "q", unique, fail_over_owner)
    check_queue_history(events, items, store, unique, changer, maybe)
    store.close()
    lease_events, changer = _lease_race(cluster, tmp_path / "l", f"{unique}-l",
                                        lambda keys: fail_over_owner(keys[0]))
    check_lease_history(lease_events, changer)
    assert [e for e in events + lease_events if e["event"] == "error"] == []  # a graceful failover fails no call
    assert redirects_seen(cluster)["MOVED"] > 0


def test_durable_claims_and_leases_through_a_killed_primary(
        cluster: LocalCluster, tmp_path: Path, unique: str) -> None:
    """The primary is SIGKILLed; its replica is promoted by the cluster. With
    ``wait_replicas=1`` no grant or ack is handed out before a replica has it,
    so nothing handed out is lost: tokens never go back, nobody holds twice.
    The killed node then comes back as the new primary's replica (durable mode
    needs one to go on)."""
    def kill_owner(key: str) -> None:
        port = owner_port(cluster, slot_of(cluster, key))
        fail_over(cluster, port, kill=True)
        time.sleep(0.5)  # durable writes are refused meanwhile: no replica
        cluster.restart(next(n for n in cluster.nodes if n.port == port))
        cluster.wait_ready()

    durable = "&wait_replicas=1&wait_timeout_ms=500"
    events, store, items, changer, maybe = _queue_race(cluster, tmp_path / "q", unique, kill_owner, durable)
    check_queue_history(events, items, store, unique, changer, maybe)
    store.close()
    events, changer = _lease_race(cluster, tmp_path / "l", f"{unique}-l", lambda keys: kill_owner(keys[0]), durable)
    check_lease_history(events, changer)
