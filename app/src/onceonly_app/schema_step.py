"""The schema the functions need, as one step: the domain migrations plus the
coordination store's setup(), and the record of which store (and stack) the
database is set up for, with the repair a change of store needs
(db/store_switch.py: it re-queues webhook deliveries, so this step reads the
webhook retry queue's settings and sits above both ``db`` and ``webhooks``).
Deploys run it through the SchemaMigration custom resource, operators through
`onceonly migrate`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

import onceonly
from onceonly_app.db.migrate import Deadline, latest_migration, migrate
from onceonly_app.db.store_identity import identify
from onceonly_app.db.store_switch import SwitchReport, reconcile
from onceonly_app.webhooks.config import WebhookConfig


@dataclass(frozen=True)
class SchemaReport:
    migrations_applied: list[str]
    store_kind: str
    schema_version: str  # the newest migration the database now has
    store_switch: SwitchReport  # what the store's identity check did (unchanged, or the repair)
    retry_queue_depth: int  # the webhook retry queue's items, after the step


def apply_schema(database_url: str, store_url: str, deadline: Deadline | None = None, *,
                 stack: str | None = None, force_repair: bool = False, hand_over: bool = False) -> SchemaReport:
    """The store's setup(), then the pending domain migrations and the store
    identity check (the repair after a change of store, store_switch.py) in one
    transaction. Idempotent, and safe from many processes at once (an advisory
    lock, a conditional create); an upgrade applies only the new migrations.
    The COMMIT comes last, so under a ``deadline`` nothing else can still be
    running when the answer is given. ``stack`` (a CloudFormation stack id)
    claims the database for that stack: another stack's is refused with
    StackConflictError unless ``hand_over``. ``force_repair`` repairs even when
    the store looks unchanged."""
    webhooks = WebhookConfig.from_env()
    store = onceonly.connect(store_url)
    switch: list[SwitchReport] = []

    def check_store(conn: psycopg.Connection[Any]) -> None:
        switch[:] = [reconcile(conn, store, identity, queue_name=webhooks.queue_name,
                               requeue_lease=webhooks.attempt_lease, stack=stack, force=force_repair,
                               hand_over=hand_over)]

    try:
        store.setup()
        identity = identify(store, store_url)
        applied = migrate(database_url, deadline, then=check_store)
        depth = store.queue(webhooks.queue_name).depth().total
    finally:
        store.close()
    return SchemaReport(applied, identity.kind, latest_migration(), switch[0], depth)
