"""The domain database remembers which coordination store it was set up for.
When the store changes (a new StoreKind or StoreUrlSecretArn, a table made
anew after `sam delete` + `sam deploy`, a replaced table), the database still
holds the old store's fencing tokens and the old store still holds the queue
items: without a repair the payment watcher is refused as "superseded" until
the new tokens pass the old fences, and retries are never claimed again.

The repair runs inside the migration's transaction (schema.py), so it commits
with the identity it records or not at all:

- the payment cursors' fences, and those of unfinished job ticks, go back to
  0 (the new store's first token, 1, passes them);
- every delivery the old store held a queue item for gets a new generation
  and token 0 (the old store's claims are fenced off), and is put on the new
  store's queue, due when it was due, BEFORE the commit: a failure rolls the
  database back and the next run does it all again; a put twice is one item.

A database belongs to one stack: another stack's schema step is refused
(StackConflictError), because two stacks' pollers and retry workers would
fence each other off. `onceonly migrate --stack` hands it over on purpose."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

import onceonly
from onceonly_app.sql_queries import load_queries

from .store_identity import StoreIdentity

SQL = load_queries(Path(__file__).with_suffix(".sql"))
PUT_CHUNK = 500  # queue items per put_many call


class StackConflictError(onceonly.OnceOnlyError):
    """The database is set up for another stack: refused, nothing changed."""


@dataclass(frozen=True)
class SwitchReport:
    action: str  # unchanged | first-record | switched | forced | stack-handover
    store: StoreIdentity
    previous: str | None  # "kind instance" recorded before, if any
    cursors_reset: int = 0
    ticks_reset: int = 0
    deliveries_requeued: int = 0

    @property
    def repaired(self) -> bool:
        return self.action != "unchanged"

    def summary(self) -> str:
        if not self.repaired:
            return f"store unchanged ({self.store})"
        return (f"store {self.action}: now {self.store}"
                + (f", was {self.previous}" if self.previous else "")
                + f"; {self.cursors_reset} payment cursor fence(s) and {self.ticks_reset} unfinished tick fence(s) "
                  f"reset, {self.deliveries_requeued} delivery(ies) re-queued")

    def as_data(self) -> dict[str, str]:
        """The custom resource's attributes (strings only)."""
        return {"StoreSwitch": self.action, "StoreInstance": self.store.instance,
                "FencesReset": str(self.cursors_reset + self.ticks_reset),
                "DeliveriesRequeued": str(self.deliveries_requeued)}


def stack_of(stack_id: str | None) -> str | None:
    """``arn:…:stack/NAME/RUN-ID`` -> ``arn:…:stack/NAME``: a stack deleted and
    created again under its name is the same owner."""
    if not stack_id:
        return None
    head, _, tail = stack_id.partition(":stack/")
    return f"{head}:stack/{tail.split('/', 1)[0]}" if tail else stack_id


def reconcile(conn: psycopg.Connection[Any], store: onceonly.Store, identity: StoreIdentity, *,
              queue_name: str, requeue_lease: float, stack: str | None = None, force: bool = False,
              hand_over: bool = False) -> SwitchReport:
    """Record ``identity`` (and ``stack``) as the database's store, repairing
    fences and queue items if it is another store than the recorded one (or
    none was recorded: an earlier version's database, its store unknown), or
    if ``force``. Runs in the caller's transaction. Raises StackConflictError
    when another stack is recorded, unless ``hand_over``."""
    with conn.cursor(row_factory=dict_row) as cur:
        recorded = cur.execute(SQL["recorded_identity"]).fetchone()
        owner = recorded["stack"] if recorded else None
        if stack and owner and owner != stack and not hand_over:
            raise StackConflictError(
                f"the domain database is set up for another stack ({owner}); two stacks on one domain database "
                "fence each other's payment watcher and retries. Give this stack its own database, or hand this "
                f"one over on purpose: `onceonly migrate --database URL --store URL --stack {stack}` "
                "(docs/deploy.md, \"One database, one stack\")")
        previous = f"{recorded['store_kind']} {recorded['store_instance']}" if recorded else None
        same = recorded is not None and identity.same_store(recorded["store_kind"], recorded["store_instance"])
        if same and not force and not (hand_over and stack and owner != stack):
            if stack and owner is None:
                _record(cur, identity, stack)
            return SwitchReport("unchanged", identity, previous)
        action = ("forced" if force else "stack-handover") if same else \
            ("switched" if recorded is not None else "first-record")
        cursors = len(cur.execute(SQL["reset_cursor_fences"]).fetchall())
        ticks = len(cur.execute(SQL["reset_tick_fences"]).fetchall())
        deliveries = cur.execute(SQL["requeue_deliveries"], {"lease": requeue_lease}).fetchall()
        queue = store.queue(queue_name)
        for start in range(0, len(deliveries), PUT_CHUNK):
            queue.put_many((row["id"], row["due_at"], {"generation": row["generation"]})
                           for row in deliveries[start:start + PUT_CHUNK])
        _record(cur, identity, stack)
        cur.execute(SQL["record_switch"], {
            "reason": action, "from_kind": recorded["store_kind"] if recorded else None,
            "from_instance": recorded["store_instance"] if recorded else None, "to_kind": identity.kind,
            "to_instance": identity.instance, "stack": stack or owner, "cursors": cursors, "ticks": ticks,
            "deliveries": len(deliveries)})
    return SwitchReport(action, identity, previous, cursors, ticks, len(deliveries))


def _record(cur: psycopg.Cursor[Any], identity: StoreIdentity, stack: str | None) -> None:
    cur.execute(SQL["record_identity"], {"kind": identity.kind, "instance": identity.instance,
                                         "location": identity.location, "stack": stack})
