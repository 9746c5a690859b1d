"""The simulation's endpoint-operation scenarios (recovery_checks.py judges
them), on a tenant of their own (no fan-out event, no e-mail of the billing
scenarios reaches it):

- **recover**: a subscription whose endpoint answers every request
  `webhook-delivery: abort-message` until the run revives it. Its events end
  ``aborted``; once all have, the run revives the endpoint and recovers the
  subscription (what `onceonly subscriptions recover` runs) twice in a row,
  while the replicas' retry workers run: each event is delivered once more,
  under its webhook-id, and the second run sends nothing new.
- **auto-disable**: a subscription whose endpoint fails every request until
  the run revives it, seeded as failing for the whole period already (its
  ``failing_since`` five days and a minute before the run): the run's first
  failure of it disables it automatically, the tenant's operational
  subscription gets ``endpoint.disabled``, and its events are held; once all
  are, the run revives the endpoint and enables it (held events go out)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

RECOVER_EVENTS = 3
FAILING_EVENTS = 3
# Five days (the default WEBHOOK_AUTO_DISABLE_AFTER_SECONDS) and a minute: failing for longer than the period.
FAILING_FOR = 5 * 24 * 3600 + 60
SEED_FAILING = "UPDATE webhook_subscriptions SET failing_since = to_timestamp(%s) WHERE id = %s"
STATES = """
SELECT (SELECT enabled FROM webhook_subscriptions WHERE id = %(webhook_id)s) AS enabled,
       count(*) FILTER (WHERE status = %(status)s) AS matching, count(*) AS total
  FROM webhook_deliveries WHERE id = ANY(%(ids)s)"""


@dataclass
class RecoveryScenario:
    run_id: str
    tenant: str = ""
    aborting: str = ""  # answers abort-message until abort_revived
    failing: str = ""  # fails every request until fail_revived; failing for the whole period at the start
    operational: str = ""  # the tenant's operational subscription (endpoint.disabled)
    abort_revived: threading.Event = field(default_factory=threading.Event)
    fail_revived: threading.Event = field(default_factory=threading.Event)
    aborted: set[str] = field(default_factory=set)  # the aborting subscription's deliveries
    failing_ids: set[str] = field(default_factory=set)  # the failing subscription's deliveries
    failing_since: float = 0.0
    notice: str = ""  # the endpoint.disabled delivery the disable must make
    started_at: float = field(default_factory=time.time)
    recovered_at: float | None = None  # when the run revived the endpoint and recovered (this host's clock)
    recovered: list[tuple[int, int, int]] = field(default_factory=list)  # (re-queued, newly sent, was aborted)
    disabled_at: float | None = None  # when the run first saw the automatic disable committed
    enabled_at: float | None = None

    def seed(self, conn: psycopg.Connection[Any], receiver: Any, subscribe: Any) -> None:
        """``subscribe(name, tenant, behaviour, event_types, new_tenant)``: WebhookLoad's."""
        from onceonly_app.webhooks.deliveries import delivery_id_for
        from onceonly_app.webhooks.endpoint_health import ENDPOINT_DISABLED

        from ..testing.receiver import Behaviour

        self.tenant = f"sim-{self.run_id}-ops"
        self.aborting, self.failing = f"sim-{self.run_id}-abort", f"sim-{self.run_id}-failing"
        self.operational = f"sim-{self.run_id}-operational"
        subscribe(self.aborting, self.tenant, Behaviour(abort_until=self.abort_revived), None, True)
        subscribe(self.failing, self.tenant, Behaviour(fail_until=self.fail_revived), None, False)
        subscribe(self.operational, self.tenant, Behaviour(), [ENDPOINT_DISABLED], False)
        self.failing_since = float(int(time.time()) - FAILING_FOR)
        conn.execute(SEED_FAILING, (self.failing_since, self.failing))
        self.notice = delivery_id_for(self.operational,
                                      f"{ENDPOINT_DISABLED}:{self.failing}:{self.failing_since:.6f}")

    @property
    def events(self) -> int:
        return RECOVER_EVENTS + FAILING_EVENTS

    def step(self, conn: psycopg.Connection[Any], queue: Any) -> None:
        """On each poll of the run: recover once every aborting event is aborted;
        enable once the failing subscription is disabled and its events held."""
        from onceonly_app.webhooks.recovery import recover
        from onceonly_app.webhooks.subscriptions import enable

        if self.recovered_at is None and self._all(conn, self.aborting, self.aborted, "aborted"):
            self.abort_revived.set()
            self.recovered_at = time.time()
            for _ in range(2):  # the operator runs it twice: the second sends nothing new
                done = recover(conn, queue, self.aborting, self.started_at - 60, actor="simulate")
                self.recovered.append((done.count, done.newly_sent, done.previous["aborted"]))
        if self.enabled_at is None:
            row = conn.execute(STATES, {"webhook_id": self.failing, "ids": sorted(self.failing_ids),
                                        "status": "held"}).fetchone()
            if row is None or row[0] is None or row[0]:
                return
            if self.disabled_at is None:
                self.disabled_at = time.time()  # read back: at or after the disable's commit
            if row[1] == row[2] == len(self.failing_ids):
                self.fail_revived.set()
                self.enabled_at = time.time()
                enable(conn, queue, self.failing, actor="simulate")

    def _all(self, conn: psycopg.Connection[Any], webhook_id: str, ids: set[str], status: str) -> bool:
        row = conn.execute(STATES, {"webhook_id": webhook_id, "ids": sorted(ids), "status": status}).fetchone()
        return row is not None and row[1] == row[2] == len(ids)
