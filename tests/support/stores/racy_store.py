"""A deliberately broken store, for tests only: the onceonly Store and Queue
protocols on Redis with every check-then-set split into a read and a later
write (with a pause in between, to widen the race), and no fencing at all
(renew, release, complete, ack and retry never check the token). It is what
onceonly's stores exist to avoid; the model check and `onceonly selftest` must
both fail on it.

URL: the test Redis URL with ``?prefix=`` (its keys live under that prefix)."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import redis

from onceonly import Claim, Lease, LeaseState, QueueDepth

RACE_WINDOW = 0.005  # seconds between the read and the write


class RacyStore:
    kind = "racy"

    def __init__(self, url: str) -> None:
        self.prefix = dict(parse_qsl(urlsplit(url).query))["prefix"]
        self.client = redis.Redis.from_url(url.split("?", 1)[0])

    def setup(self) -> None:
        pass

    def _key(self, name: str) -> str:
        return f"{self.prefix}:racy-lease:{name}"

    def acquire(self, name: str, ttl: float = 30.0) -> Lease | None:
        record = self.client.hgetall(self._key(name))
        now = time.time()
        if record and float(record[b"busy_until"]) > now:
            return None
        time.sleep(RACE_WINDOW)  # someone else may take it meanwhile: we overwrite them
        lease = Lease(name, secrets.token_hex(8), int(record.get(b"token", 0)) + 1, now + ttl)
        self.client.hset(self._key(name), mapping={"owner": lease.owner, "token": lease.token,
                                                   "busy_until": lease.expires_at, "completed": 0})
        return lease

    def renew(self, lease: Lease, ttl: float = 30.0) -> Lease:
        expires_at = time.time() + ttl
        self.client.hset(self._key(lease.name), "busy_until", expires_at)
        return Lease(lease.name, lease.owner, lease.token, expires_at)

    def release(self, lease: Lease) -> bool:
        self.client.hset(self._key(lease.name), mapping={"busy_until": time.time(), "owner": ""})
        return True

    def complete(self, lease: Lease, keep: float = 86400.0, *, expire: bool = False) -> bool:
        self.client.hset(self._key(lease.name), mapping={"busy_until": time.time() + keep, "completed": 1})
        return True

    def inspect(self, name: str) -> LeaseState | None:
        r = self.client.hgetall(self._key(name))
        if not r:
            return None
        return LeaseState(name, r[b"owner"].decode() or None, int(r[b"token"]), float(r[b"busy_until"]),
                          r[b"completed"] == b"1")

    def queue(self, name: str) -> RacyQueue:
        return RacyQueue(self, name)

    def close(self) -> None:
        self.client.close()


class RacyQueue:
    def __init__(self, store: RacyStore, name: str) -> None:
        self.name, self._client, self._key = name, store.client, f"{store.prefix}:racy-queue:{name}"

    def _items(self) -> dict[str, dict[str, Any]]:
        return {k.decode(): json.loads(v) for k, v in self._client.hgetall(self._key).items()}

    def _write(self, item_id: str, item: dict[str, Any]) -> None:
        self._client.hset(self._key, item_id, json.dumps(item))

    def put(self, item_id: str, due_at: float | None = None, payload: Any = None) -> None:
        old = self._items().get(item_id, {"token": 0, "attempt": 0})
        self._write(item_id, {**old, "payload": payload, "owner": None,
                              "claimable_at": time.time() if due_at is None else due_at})

    def cancel(self, item_id: str) -> bool:
        return bool(self._client.hdel(self._key, item_id))

    def claim(self, limit: int = 25, lease: float = 60.0) -> list[Claim]:
        now = time.time()
        due = sorted((i["claimable_at"], k, i) for k, i in self._items().items() if i["claimable_at"] <= now)
        time.sleep(RACE_WINDOW)
        claims = []
        for _, item_id, item in due[:limit]:
            owner = secrets.token_hex(8)
            item.update(token=item["token"] + 1, attempt=item["attempt"] + 1, owner=owner, claimable_at=now + lease)
            self._write(item_id, item)
            claims.append(Claim(self.name, item_id, item["payload"], item["token"], item["attempt"], owner,
                                now + lease))
        return claims

    def ack(self, claim: Claim) -> bool:
        return self.cancel(claim.item_id)

    def ack_many(self, claims: Sequence[Claim]) -> list[bool]:
        return [self.ack(c) for c in claims]

    def retry(self, claim: Claim, due_at: float) -> bool:
        item = self._items().get(claim.item_id)
        if item is None:
            return False
        self._write(claim.item_id, {**item, "owner": None, "claimable_at": due_at})
        return True

    def depth(self) -> QueueDepth:
        now = time.time()
        items = self._items().values()
        return QueueDepth(
            due=sum(1 for i in items if i["claimable_at"] <= now),
            scheduled=sum(1 for i in items if i["claimable_at"] > now and not i["owner"]),
            in_flight=sum(1 for i in items if i["claimable_at"] > now and i["owner"]),
        )
