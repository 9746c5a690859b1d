"""One worker process of a fault scenario (spawned: no inherited sockets).

It drains the scenario's queue (claim a batch; for each item POST a signed
webhook whose ``webhook-id`` is the item id, the idempotency key; then ack)
and, now and then, runs the cron handler (``onceonly.scheduled``) for one of
the scenario's ticks, whose body POSTs a webhook keyed by the tick. Every
store call and every POST goes into the shared history (RecordedStore), so a
SIGKILL anywhere leaves a history that shows where the worker died.

A store error is expected here (the store restarts, the link drops): the
worker backs off (exponential, jittered, capped) and goes on; after a few
errors in a row it drops its store and connects afresh, like a Lambda
container that is replaced."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import signal
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from standardwebhooks import Webhook

import onceonly
from onceonly import Claim
from onceonly.scheduled import SCHEDULED_DETAIL_TYPE, SCHEDULED_SOURCE, Tick, scheduled
from onceonly_cli.testing.history import HistoryWriter
from tests.support.stores.recorded_store import RecordedStore

BACKOFF_BASE = 0.05
BACKOFF_CAP = 1.0
RECONNECT_AFTER = 3  # errors in a row
# A claim whose lease ends sooner than this is given up, not started: its POST
# could land after the item was granted to, and done by, someone else.
LEASE_MARGIN = 0.5


def tick_event(when: str) -> dict[str, Any]:
    return {"source": SCHEDULED_SOURCE, "detail-type": SCHEDULED_DETAIL_TYPE, "time": when,
            "id": str(uuid.uuid4()), "detail": {}}


def open_store(cfg: dict[str, Any]) -> onceonly.Store:
    """The scenario's store; a DynamoDB store on a clock ``skew`` seconds off."""
    skew = float(cfg.get("skew", 0.0))
    if not skew:
        return onceonly.connect(cfg["url"])
    from urllib.parse import parse_qsl

    from onceonly.dynamodb import DynamoDBStore

    parts = urlsplit(cfg["url"])
    return DynamoDBStore.from_url(parts.netloc, dict(parse_qsl(parts.query)), clock=lambda: time.time() + skew)


class Poster:
    """Signed webhook POSTs to the scenario's receiver, keyed by ``webhook-id``."""

    def __init__(self, url: str, secret: str, timeout: float) -> None:
        parts = urlsplit(url)
        self.host, self.port, self.path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path
        self.signer, self.timeout = Webhook(secret), timeout

    def post(self, key: str, body: dict[str, Any]) -> int:
        data = json.dumps(body)
        now = datetime.now(UTC)
        headers = {"content-type": "application/json", "webhook-id": key,
                   "webhook-timestamp": str(int(now.timestamp())),
                   "webhook-signature": self.signer.sign(key, now, data)}
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("POST", self.path, body=data, headers=headers)
            return conn.getresponse().status
        finally:
            conn.close()


class Worker:
    def __init__(self, name: str, cfg: dict[str, Any]) -> None:
        self.cfg, self.rng = cfg, random.Random(f"{name}-{os.getpid()}")
        self.history = HistoryWriter(cfg["history"], name)
        self.poster = Poster(cfg["webhook_url"], cfg["secret"], cfg["post_timeout"])
        self.store = RecordedStore(open_store(cfg), self.history)
        self.cron = scheduled(lambda: self.store, job=cfg["job"], ttl=cfg["tick_ttl"])(self._tick_body)
        self.posted = 0

    def effect(self, key: str, token: int) -> bool:
        """The external side effect, recorded as op ``effect`` under the holder's token."""
        op = self.history.invoke("effect", key, token, key=key)
        try:
            status = self.poster.post(key, {"key": key, "token": token})
        except OSError as exc:
            op.error(exc)
            return False
        op.ok(status=status) if 200 <= status < 300 else op.fail(status=status)
        return 200 <= status < 300

    def _maybe_die(self) -> None:
        """The crash the scenario cares most about: after the POST, before the ack
        (by chance, and for sure after the ``die_after_effects``-th POST)."""
        self.posted += 1
        if self.posted == self.cfg.get("die_after_effects") or \
                self.rng.random() < self.cfg.get("die_after_effect", 0.0):
            os.kill(os.getpid(), signal.SIGKILL)

    def _maybe_die_in_call(self) -> None:
        """Sometimes SIGKILL this process a few milliseconds from now: mostly
        inside the store call about to start (mid-claim, mid-transaction)."""
        if self.rng.random() < self.cfg.get("die_in_call", 0.0):
            timer = threading.Timer(self.rng.uniform(0.0, 0.005), os.kill, (os.getpid(), signal.SIGKILL))
            timer.daemon = True
            timer.start()

    def _tick_body(self, event: Any, context: Any, tick: Tick) -> None:
        if not self.effect(tick.lock_name, tick.token):
            raise RuntimeError("the tick's POST failed")  # the guard releases the tick for a retry
        self._maybe_die()

    def handle(self, claim: Claim) -> None:
        queue = self.store.queue(self.cfg["queue"])
        # The worker's own clock (the store's, for a skewed DynamoDB store).
        now = time.time() + float(self.cfg.get("skew", 0.0))
        if now > claim.lease_expires_at - LEASE_MARGIN:  # a slow claim reply: the lease is (nearly) gone
            self.history.invoke("give_up", claim.item_id, claim.token, left=claim.lease_expires_at - now).ok()
            return
        if not self.effect(claim.item_id, claim.token):
            queue.retry(claim, due_at=time.time())
            return
        self._maybe_die()
        self._maybe_die_in_call()
        queue.ack(claim)

    def step(self) -> None:
        self._maybe_die_in_call()
        claims = self.store.queue(self.cfg["queue"]).claim(limit=self.cfg["batch"], lease=self.cfg["lease"])
        for claim in claims:
            self.handle(claim)
        ticks = self.cfg["ticks"]
        if ticks and (not claims or self.rng.random() < self.cfg["tick_rate"]):  # idle: a tick for sure
            self.cron(tick_event(self.rng.choice(ticks)), None)
        if not claims:
            time.sleep(0.05)

    def reconnect(self) -> None:
        with contextlib.suppress(Exception):  # the old store may be half broken; it is dropped anyway
            self.store.close()
        self.store = RecordedStore(open_store(self.cfg), self.history)


def run(name: str, cfg: dict[str, Any], go: Any, stop: Any) -> None:
    """The process body: connect, wait for ``go``, work until ``stop``."""
    worker = Worker(name, cfg)
    if not go.is_set():  # a first worker connects (one round trip) before the start
        worker.store.inspect("faults:ping")
    go.wait(120)
    errors = 0
    while not stop.is_set():
        try:
            worker.step()
            errors = 0
        except Exception:  # noqa: BLE001 - recorded by RecordedStore; the worker goes on
            errors += 1
            time.sleep(min(BACKOFF_CAP, BACKOFF_BASE * 2 ** errors) * worker.rng.uniform(0.5, 1.0))
            if errors % RECONNECT_AFTER == 0:
                worker.reconnect()
    worker.history.close()
