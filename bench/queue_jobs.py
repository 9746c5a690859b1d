"""Claim loops, run inside the worker processes (see bench/pool.py): each
prepares (connects, one real round trip), yields at the barrier, then takes
batches until its queue is empty. Each returns the ids it was handed, so the
parent can count duplicates, and the round trips it spent."""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import counting
from bench.pool import Job

HERE = Path(__file__).parent
BARE_POP = (HERE / "bare_pop.lua").read_text(encoding="utf-8")
LEASE = 60.0


class Tally:
    """Calls and round trips per kind of call (claim, ack, ...)."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.round_trips: dict[str, int] = {}

    def __call__(self, kind: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        before = counting.ROUND_TRIPS
        result = call(*args, **kwargs)
        self.calls[kind] = self.calls.get(kind, 0) + 1
        self.round_trips[kind] = self.round_trips.get(kind, 0) + counting.ROUND_TRIPS - before
        return result

    def result(self, ids: list[str], **extra: Any) -> dict[str, Any]:
        return {"ids": ids, "calls": self.calls, "round_trips": self.round_trips, "ended": time.monotonic(),
                **extra}


def onceonly_claims(url: str, queue: str, batch: int, profile: bool = False) -> Job:
    """claim + ack_many until empty; with ``claim(acks=...)`` the acks of a
    batch ride on the next claim, and the last claim (empty) carries the last."""
    from bench.stores import open_store, takes_acks

    store = open_store(url)
    q = store.queue(queue)
    q.depth()
    carry_acks = takes_acks(q)
    tally, ids = Tally(), list[str]()
    profiler = _profiler(profile)
    yield
    if profiler is not None:
        profiler.start()
    pending: list[Any] = []
    refused = 0  # acks the store refused: none are expected
    while True:
        if carry_acks:
            claims = tally("claim", q.claim, limit=batch, lease=LEASE, acks=pending)
            refused += list(claims.acked).count(False)
        else:
            claims = tally("claim", q.claim, limit=batch, lease=LEASE)
        if not claims:
            break
        ids.extend(c.item_id for c in claims)
        if carry_acks:
            pending = claims
        else:
            refused += tally("ack", q.ack_many, claims).count(False)
    if profiler is not None:
        profiler.stop()
    result = tally.result(ids, acks_on_claim=carry_acks, refused_acks=refused, profile=_profile_text(profiler))
    store.close()
    return result


def bare_postgres(url: str, queue: str, batch: int) -> Job:
    import psycopg

    from onceonly_app.sql_queries import load_queries

    sql = load_queries(HERE / "bare.sql")
    tally, ids = Tally(), list[str]()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT 1")
        yield
        while True:
            taken = tally("claim", _fetch_all, conn, sql["claim"], {"queue": queue, "limit": batch})
            if not taken:
                break
            batch_ids = [row[0] for row in taken]
            ids.extend(batch_ids)
            tally("ack", conn.execute, sql["ack"], {"queue": queue, "item_ids": batch_ids})
        return tally.result(ids)


def _fetch_all(conn: Any, query: str, params: dict[str, Any]) -> list[Any]:
    return list(conn.execute(query, params).fetchall())


def _redis(url: str) -> Any:
    import redis

    client = redis.Redis.from_url(url)
    client.ping()
    return client


def bare_redis(url: str, key: str, batch: int) -> Job:
    client = _redis(url)
    sha = client.script_load(BARE_POP)
    tally, ids = Tally(), list[str]()
    yield
    while True:
        taken = tally("claim", client.evalsha, sha, 1, key, batch)
        if not taken:
            break
        ids.extend(i.decode() for i in taken)
    return tally.result(ids)


def racy_redis(url: str, key: str, batch: int) -> Job:
    """The field's two-step pop: ZRANGEBYSCORE, then ZREM in a second round
    trip. Two workers can list the same ids before either removes them."""
    client = _redis(url)
    tally, ids = Tally(), list[str]()
    yield
    while True:
        listed = tally("claim", client.zrangebyscore, key, "-inf", time.time() * 1000, start=0, num=batch)
        if not listed:
            break
        tally("ack", client.zrem, key, *listed)
        ids.extend(i.decode() for i in listed)
    return tally.result(ids)


def lock_per_item(url: str, key: str, batch: int, lock_prefix: str) -> Job:
    """redis-py ``Lock`` per item: list due ids, then for each: acquire its
    lock (SET NX PX), remove it from the set (the work), release (a script).
    An item is this worker's only if the remove found it."""
    client = _redis(url)
    shuffle = random.Random(secrets.randbits(32)).shuffle
    tally, ids = Tally(), list[str]()
    yield
    while True:
        listed = tally("list", client.zrangebyscore, key, "-inf", "+inf", start=0, num=batch)
        if not listed:
            break
        shuffle(listed)  # workers reading the same head would otherwise queue on the same locks
        for raw in listed:
            lock = client.lock(f"{lock_prefix}:{raw.decode()}", timeout=LEASE, blocking=False)
            if not tally("lock", lock.acquire):
                continue
            try:
                if tally("remove", client.zrem, key, raw):
                    ids.append(raw.decode())
            finally:
                tally("unlock", lock.release)
    return tally.result(ids)


def _profiler(on: bool) -> Any:
    if not on:
        return None
    from pyinstrument import Profiler

    return Profiler(interval=0.001)


def _profile_text(profiler: Any) -> str | None:
    return None if profiler is None else str(profiler.output_text(unicode=False, color=False))
