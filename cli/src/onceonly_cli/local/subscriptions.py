"""The webhook subscription actions of `onceonly subscriptions ACTION …`: add,
list, show, update, rotate-secret, read the secret, disable, enable, delete, recover or replay a webhook
subscription, list its attempts, or set a tenant's operational contact,
without SQL (onceonly_app.webhooks.subscriptions, recovery, attempts and
endpoint_health do the work and record who changed what; this is the
wiring). One function per action in ACTIONS, each given a Request: a new
action is a new entry. Each returns a Done: its data (what --json prints) and its text (what the
terminal shows, with rich)."""

from __future__ import annotations

import dataclasses
import getpass
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import psycopg
from rich.console import Console, RenderableType
from rich.table import Table

import onceonly

from ..errors import CliError
from .ops import Ops, existing_targets, missing_tables, open_ops
from .stores import check_database

DEFAULT_REASON = "disabled by an operator"
T = TypeVar("T")


@dataclass(frozen=True)
class Request:
    """One action and what it names; each action reads only its own fields."""

    action: str  # a key of ACTIONS
    webhook_id: str = ""
    actor: str = ""  # who makes the change, for the audit ("": the OS user)
    tenant: str | None = None
    url: str | None = None
    new_id: str | None = None  # add: the new subscription's id (None: a fresh wh_…)
    new_tenant: bool = False  # add: register the tenant with billing's defaults
    include_deleted: bool = False  # list
    event_types: list[str] | None = None
    all_event_types: bool = False  # update: receive every event type again
    max_in_flight: int | None = None
    rate: float | None = None  # requests per second
    headers: list[tuple[str, str]] | None = None  # replace all of them
    clear_headers: bool = False  # update: send no custom header any more
    description: str | None = None
    metadata: dict[str, Any] | None = None
    secret: str | None = None  # add, rotate-secret: sign with this instead of a fresh one
    overlap: float | None = None  # rotate-secret: seconds the old secret still signs (None: a day)
    reason: str = DEFAULT_REASON  # disable
    retention: float | None = None  # enable: held events older than this expire (None: 7 days)
    since: datetime | None = None  # recover, replay
    until: datetime | None = None
    email: str | None = None  # contact (None with no_email: no operational e-mail)
    no_email: bool = False
    delivery: str | None = None  # attempts: only this delivery's
    limit: int = 50  # attempts: at most this many


@dataclass(frozen=True)
class Done:
    data: dict[str, Any]
    text: RenderableType


def default_actor() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid (a bare container)
        return "unknown-os-user"


def _sender_checks() -> dict[str, Any]:
    """The SSRF guard's settings the sender uses ($WEBHOOK_ALLOW_HTTP_HOSTS …)."""
    from onceonly_app.webhooks.config import WebhookConfig

    return {"allow_http_hosts": WebhookConfig.from_env().allow_http_hosts}


def _add(ops: Ops | None, conn: psycopg.Connection[Any], req: Request) -> Done:
    from onceonly_app.webhooks.subscriptions import add

    limits: dict[str, Any] = {name: value for name, value in (("max_in_flight", req.max_in_flight),
                                              ("rate_per_second", req.rate)) if value is not None}
    added = add(conn, _need(req.tenant, "--tenant"), _need(req.url, "--url"), req.event_types, actor=req.actor,
                subscription_id=req.new_id, new_tenant=req.new_tenant, **limits, **_sender_checks(), secret=req.secret,
                **_settings(req))
    types = ", ".join(req.event_types) if req.event_types else "every event type"
    table = Table(title=f"subscription {added.id} added ({types})", title_justify="left", show_header=False)
    table.add_row("id", added.id)
    table.add_row("signing secret", added.secret)
    table.add_row("", "shown only now: configure your receiver with it")
    # What was stored (the URL as normalised, the types sorted, the limits with
    # their defaults), not what was typed; the secret beside it, once.
    return Done({**_stored(conn, added.id), "secret": added.secret}, table)


def _list(ops: Ops | None, conn: psycopg.Connection[Any], req: Request) -> Done:
    from onceonly_app.webhooks.subscriptions import list_all

    rows = list_all(conn, req.tenant, include_deleted=req.include_deleted)
    table = Table(title=f"webhook subscriptions: {len(rows)}", title_justify="left")
    for column in ("id", "tenant", "url", "event types", "limits", "state"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["id"], row["tenant_id"] or "-", row["url"], _types_cell(row["event_types"]),
                      _limits_cell(row), _state_cell(row))
    return Done({"subscriptions": rows}, table)


def _show(ops: Ops | None, conn: psycopg.Connection[Any], req: Request) -> Done:
    from onceonly_app.webhooks.subscriptions import show

    row = show(conn, req.webhook_id)
    table = Table(title=f"subscription {row['id']}", title_justify="left", show_header=False)
    for label, value in (("tenant", row["tenant_id"]), ("url", row["url"]),
                         ("event types", _types_cell(row["event_types"])), ("limits", _limits_cell(row)),
                         ("state", _state_cell(row)),
                         ("previous secrets still signing", row["previous_secrets_signing"]),
                         ("deliveries", ", ".join(f"{k}: {v}" for k, v in sorted(row["deliveries"].items()))
                          or "none"),
                         ("created", _iso(row["created_at"]))):
        table.add_row(label, str(value))
    for change in row["changes"]:
        table.add_row(f"{_iso(change['at'])} {change['action']}",
                      f"by {change['actor']} {json.dumps(change['detail'], sort_keys=True)}")
    return Done(row, table)


def _update(ops: Ops | None, conn: psycopg.Connection[Any], req: Request) -> Done:
    from onceonly_app.webhooks.subscriptions import configure, update

    settings = _settings(req)
    core = (req.url, req.event_types, req.max_in_flight, req.rate)
    changed: dict[str, Any] = {}
    if any(value is not None for value in core) or req.all_event_types or not settings:
        changed = update(conn, req.webhook_id, url=req.url, event_types=req.event_types,
                         all_event_types=req.all_event_types, max_in_flight=req.max_in_flight,
                         rate_per_second=req.rate, actor=req.actor, **_sender_checks())
    if settings:  # the subscription's own settings: a change of their own in the audit ("configure")
        changed.update(configure(conn, req.webhook_id, actor=req.actor, **settings))
    text = "; ".join(f"{field}: {json.dumps(c['from'])} -> {json.dumps(c['to'])}" for field, c in changed.items())
    return Done({**_stored(conn, req.webhook_id), "changed": changed},
                f"{req.webhook_id}: {text or 'nothing changed'} (applies to events from now on)")


def _rotate_secret(ops: Ops | None, conn: psycopg.Connection[Any], req: Request) -> Done:
    from onceonly_app.webhooks.subscriptions import DEFAULT_OVERLAP, rotate_secret

    overlap = DEFAULT_OVERLAP if req.overlap is None else req.overlap
    secret = rotate_secret(conn, req.webhook_id, overlap=overlap, actor=req.actor, secret=req.secret)
    return Done({"id": req.webhook_id, "secret": secret, "overlap": overlap},
                f"{req.webhook_id}: new signing secret (shown only now): {secret}\n"
                f"the old secret keeps signing beside it for {overlap:g} s")


def _disable(ops: Ops | None, conn: psycopg.Connection[Any], req: Request) -> Done:
    from onceonly_app.webhooks.subscriptions import disable

    changed = disable(conn, req.webhook_id, req.reason, actor=req.actor)
    return Done({"id": req.webhook_id, "changed": changed, "reason": req.reason},
                f"{req.webhook_id}: {'disabled' if changed else 'was disabled already'}; its events are held")


def _enable(ops: Ops | None, conn: psycopg.Connection[Any], req: Request) -> Done:
    from onceonly_app.webhooks.subscriptions import HOLD_RETENTION, enable

    assert ops is not None  # STORE_ACTIONS: the command opened the store
    retention = HOLD_RETENTION if req.retention is None else req.retention
    done = enable(conn, ops.store.queue(ops.queue_name), req.webhook_id, retention=retention, actor=req.actor)
    return Done({"id": req.webhook_id, "released": done.released, "expired": done.expired},
                f"{req.webhook_id}: enabled; {len(done.released)} held deliveries queued in order, "
                f"{len(done.expired)} expired (held longer than {retention:g} s)")


def _delete(ops: Ops | None, conn: psycopg.Connection[Any], req: Request) -> Done:
    from onceonly_app.webhooks.subscriptions import delete

    dropped = delete(conn, req.webhook_id, actor=req.actor)
    return Done({"id": req.webhook_id, "dropped": dropped},
                f"{req.webhook_id}: deleted; {len(dropped)} unfinished deliveries dropped")


def _secret(ops: Ops | None, conn: psycopg.Connection[Any], req: Request) -> Done:
    from onceonly_app.webhooks.subscriptions import current_secret

    secret = current_secret(conn, req.webhook_id, actor=req.actor)
    return Done({"id": req.webhook_id, "secret": secret}, secret)


def _settings(req: Request) -> dict[str, Any]:
    """The subscription's own settings named on the command line (none: {})."""
    settings: dict[str, Any] = {}
    if req.clear_headers:
        settings["headers"] = {}
    if req.headers:
        names = [name.lower() for name, _ in req.headers]
        if len(names) != len(set(names)):
            raise ValueError("a header is named twice (names are case-insensitive)")
        settings["headers"] = dict(req.headers)
    for name in ("description", "metadata"):
        if getattr(req, name) is not None:
            settings[name] = getattr(req, name)
    return settings


def _attempts(ops: Ops | None, conn: psycopg.Connection[Any], req: Request) -> Done:
    from onceonly_app.webhooks.attempts import attempt_history

    rows = attempt_history(conn, req.webhook_id, delivery_id=req.delivery, limit=req.limit)
    table = Table(title=f"attempts of {req.webhook_id}" + (f", delivery {req.delivery}" if req.delivery else "")
                  + f": {len(rows)} (newest first)", title_justify="left")
    for column in ("time", "delivery (webhook-id)", "attempt", "outcome", "code", "latency ms", "error"):
        table.add_column(column)
    for row in rows:
        outcome = row["outcome"] if row["recorded"] else f"{row['outcome']} (refused: stale holder)"
        table.add_row(_iso(row["started_at"]), row["delivery_id"], f"{row['generation']}.{row['attempt'] or '-'}",
                      outcome, str(row["response_code"] or "-"), f"{row['latency_ms']:g}", (row["error"] or "")[:60])
    return Done({"id": req.webhook_id, "delivery": req.delivery, "attempts": rows}, table)


def _recover(ops: Ops | None, conn: psycopg.Connection[Any], req: Request) -> Done:
    from onceonly_app.webhooks import recovery

    assert ops is not None  # STORE_ACTIONS: the command opened the store
    run = recovery.replay if req.action == "replay" else recovery.recover
    done = run(conn, ops.store.queue(ops.queue_name), req.webhook_id, _need(req.since, "--since"), req.until,
               actor=req.actor)
    before = ", ".join(f"{status}: {n}" for status, n in sorted(done.previous.items())) or "none"
    return Done({"id": req.webhook_id, "requeued": done.count, "previous": dict(done.previous),
                 "deliveries": done.delivery_ids},
                f"{req.webhook_id}: {done.count} deliveries queued again in event order, same webhook-ids "
                f"(they were {before})")


def _contact(ops: Ops | None, conn: psycopg.Connection[Any], req: Request) -> Done:
    from onceonly_app.webhooks.endpoint_health import set_contact

    email = None if req.no_email else req.email
    if not set_contact(conn, _need(req.tenant, "--tenant"), email):
        raise ValueError(f"unknown tenant {req.tenant!r}: billing has no settings row for it")
    return Done({"tenant_id": req.tenant, "contact_email": email},
                f"{req.tenant}: operational e-mails go to {email}" if email else
                f"{req.tenant}: no operational e-mail is sent")


STORE_ACTIONS = frozenset({"enable", "recover", "replay"})  # the others need only the domain database
ACTIONS: dict[str, Callable[[Ops | None, psycopg.Connection[Any], Request], Done]] = {
    "add": _add, "list": _list, "show": _show, "update": _update, "rotate-secret": _rotate_secret,
    "disable": _disable, "enable": _enable, "delete": _delete, "secret": _secret,
    "attempts": _attempts, "recover": _recover, "replay": _recover, "contact": _contact,
}


def _need(value: T | None, option: str) -> T:
    """``value``, which the action cannot do without."""
    if value is None:
        raise ValueError(f"{option} is required")
    return value


def _stored(conn: psycopg.Connection[Any], webhook_id: str) -> dict[str, Any]:
    """The subscription's row as stored (never a secret), without its history."""
    from onceonly_app.webhooks.subscriptions import show

    row = show(conn, webhook_id)
    row.pop("changes")
    return row


def _types_cell(event_types: list[str] | None) -> str:
    return "all" if event_types is None else ", ".join(event_types)


def _limits_cell(row: dict[str, Any]) -> str:
    return f"{row['max_in_flight']} in flight, {row['rate_per_second']:g}/s"


def _state_cell(row: dict[str, Any]) -> str:
    if row["deleted_at"] is not None:
        return f"deleted {_iso(row['deleted_at'])}"
    return "enabled" if row["enabled"] else f"disabled: {row['disabled_reason']}"


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return _iso(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def manage(request: Request, database: str | None = None, store: str | None = None, *,
           as_json: bool = False) -> int:
    """Do ``request`` on the subscriptions in ``database`` (None: ops.existing_targets's);
    ``store`` is opened only for the actions that queue (STORE_ACTIONS). Prints the
    result as a table, or as JSON for scripts."""
    if not request.actor:
        request = dataclasses.replace(request, actor=default_actor())
    if request.action in STORE_ACTIONS:
        with open_ops(database, store) as ops, ops.pool.connection() as conn:
            conn.autocommit = True  # each action commits its own transaction (enable before it queues)
            done = _run(ops, conn, request)
    else:
        database_url, _store = existing_targets(database, store)
        check_database(database_url)
        with psycopg.connect(database_url, autocommit=True, connect_timeout=5) as conn:
            done = _run(None, conn, request)
    if as_json:
        print(json.dumps(done.data, indent=2, sort_keys=True, default=_json_value))
    else:
        Console(soft_wrap=True).print(done.text)
    return 0


def _run(ops: Ops | None, conn: psycopg.Connection[Any], req: Request) -> Done:
    """The action, with every error it can meet as one line."""
    from onceonly_app.webhooks.subscriptions import SubscriptionDeletedError

    try:
        return ACTIONS[req.action](ops, conn, req)
    except (LookupError, SubscriptionDeletedError, ValueError) as exc:  # UnknownSubscriptionError among them
        raise CliError(str(exc)) from None
    except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn) as exc:
        raise missing_tables(exc) from None
    except (psycopg.Error, onceonly.OnceOnlyError) as exc:
        raise CliError(f"subscriptions {req.action} failed: {str(exc).splitlines()[0]}") from None
