"""`onceonly subscriptions ACTION …`: add, list, show, update, rotate-secret,
read the secret, disable, enable, delete, recover or replay a webhook
subscription, list its attempts, or set a tenant's operational contact,
without SQL (onceonly_app.webhooks.subscriptions, recovery, attempts and
endpoint_health do the work and record who changed what; this is the
wiring). One function per action in ACTIONS: a new action is a new entry.
Each returns a Done: its data (what --json prints) and its text (what the
terminal shows, with rich)."""

from __future__ import annotations

import argparse
import getpass
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from rich.console import Console, RenderableType
from rich.table import Table

import onceonly

from .errors import CliError
from .ops import Ops, existing_targets, missing_tables, open_ops
from .stores import check_database

DEFAULT_REASON = "disabled by an operator"


@dataclass(frozen=True)
class Done:
    data: dict[str, Any]
    text: RenderableType


def default_actor() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid (a bare container)
        return "unknown-os-user"


def _event_types(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_subscriptions_parser(commands: Any, store_options: Callable[[argparse.ArgumentParser, str], None],
                             non_negative_float: Callable[[str], float]) -> None:
    subscriptions = commands.add_parser("subscriptions", help="manage webhook subscriptions: add, list, show, "
                                                              "update, rotate-secret, secret, disable, enable, "
                                                              "delete, recover, replay, attempts, contact")
    actions = subscriptions.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="subscribe a URL to a tenant's events; prints its whsec_ secret once")
    add.add_argument("--tenant", required=True, help="the tenant whose events it receives")
    add.add_argument("--url", required=True, help="the endpoint (https; checked by the SSRF guard now and at "
                                                  "every attempt)")
    add.add_argument("--id", dest="new_id", metavar="WEBHOOK_ID", help="its id (default: a fresh wh_…)")
    add.add_argument("--new-tenant", action="store_true",
                     help="register the tenant with billing's defaults if billing does not know it yet")
    listing = actions.add_parser("list", help="the subscriptions (never their secrets)")
    listing.add_argument("--tenant", help="only this tenant's")
    listing.add_argument("--include-deleted", action="store_true", help="deleted ones too")
    update = actions.add_parser("update", help="a new URL or event-type filter (applies to later events)")
    update.add_argument("--url", help="the new endpoint")
    update.add_argument("--all-event-types", action="store_true", help="receive every event type again")
    update.add_argument("--clear-headers", action="store_true", help="send no custom header any more")
    for parser in (add, update):
        parser.add_argument("--header", dest="headers", action="append", type=_header, metavar="'NAME: VALUE'",
                            help="a header sent with every attempt (repeatable; on update the headers given "
                                 "replace all of them); never a signature header or Host")
        parser.add_argument("--description", help="what the endpoint is, for people")
        parser.add_argument("--metadata", type=_json_object, metavar="JSON",
                            help="a JSON object kept with the subscription (replaces the previous one)")
        parser.add_argument("--event-types", type=_event_types, metavar="TYPE[,TYPE…]",
                            help="only these event types (default for add: all)")
        parser.add_argument("--max-in-flight", type=int, metavar="N",
                            help="requests to it at once, across every replica (default for add: 10)")
        parser.add_argument("--rate", type=float, metavar="PER_SECOND",
                            help="requests to it per second, across every replica (default for add: 50)")
    rotate = actions.add_parser("rotate-secret", help="a new signing secret, printed once; the old one keeps "
                                                      "signing beside it for the overlap")
    for parser in (add, rotate):
        parser.add_argument("--secret", metavar="whsec_…",
                            help="sign with this secret instead of a fresh one (migrating from another sender)")
    rotate.add_argument("--overlap", type=non_negative_float, default=None, metavar="SECONDS",
                        help="how long the old secret still signs (default 86400: a day)")
    disable = actions.add_parser("disable", help="stop sending; its events are held until it is enabled")
    disable.add_argument("--reason", default=DEFAULT_REASON, help=f"why (default: {DEFAULT_REASON!r})")
    enable = actions.add_parser("enable", help="send again: the held events go out in order")
    enable.add_argument("--retention", type=non_negative_float, default=None, metavar="SECONDS",
                        help="held events older than this are expired, not sent (default 604800: 7 days)")
    actions.add_parser("delete", help="soft-delete: no more events; unfinished deliveries end dropped")
    actions.add_parser("show", help="one subscription, its deliveries by status and its recorded changes")
    actions.add_parser("secret", help="print the secret it signs with now (the read is audited)")
    recover = actions.add_parser("recover", help="send again its deliveries that failed (dead, expired, aborted, "
                                                 "retrying) whose event happened in the window")
    replay = actions.add_parser("replay", help="as recover, and its succeeded deliveries too (same webhook-ids)")
    for parser in (recover, replay):
        parser.add_argument("--since", required=True, type=_moment, metavar="TIME",
                            help="ISO 8601 with a zone, e.g. 2026-12-01T09:00:00Z (events from then on)")
        parser.add_argument("--until", type=_moment, metavar="TIME", help="events before this (default: now)")
    contact = actions.add_parser("contact", help="where a tenant's operational e-mails go (an automatic "
                                                 "disable, a message out of attempts)")
    contact.add_argument("--tenant", required=True, help="the tenant")
    who = contact.add_mutually_exclusive_group(required=True)
    who.add_argument("--email", help="the address (sent through the notifications job and SES)")
    who.add_argument("--none", action="store_true", help="send no operational e-mail")
    history = actions.add_parser("attempts", help="its attempts, newest first: time, outcome, response code, "
                                                  "latency, error (the last 7 days)")
    history.add_argument("--delivery", metavar="DELIVERY_ID", help="only this delivery's (its webhook-id)")
    history.add_argument("--limit", type=int, default=50, metavar="N", help="at most N attempts (default 50)")
    for name, action in actions.choices.items():
        if name not in ("add", "list", "contact"):
            action.add_argument("webhook_id", metavar="WEBHOOK_ID")
        if name not in ("list", "show", "attempts", "contact"):
            action.add_argument("--actor", default=None,
                                help="who makes the change, for the audit (default: the OS user)")
        action.add_argument("--json", action="store_true", help="print the result as JSON, for scripts")
        store_options(action, "postgresql or redis (the local server)")


def _sender_checks() -> dict[str, Any]:
    """The SSRF guard's settings the sender uses ($WEBHOOK_ALLOW_HTTP_HOSTS …)."""
    from onceonly_app.webhooks.config import WebhookConfig

    return {"allow_http_hosts": WebhookConfig.from_env().allow_http_hosts}


def _add(ops: Ops | None, conn: psycopg.Connection[Any], args: argparse.Namespace) -> Done:
    from onceonly_app.webhooks.subscriptions import add

    limits = {name: value for name, value in (("max_in_flight", args.max_in_flight),
                                              ("rate_per_second", args.rate)) if value is not None}
    added = add(conn, args.tenant, args.url, args.event_types, actor=args.actor, subscription_id=args.new_id,
                new_tenant=args.new_tenant, **limits, **_sender_checks(), secret=args.secret,
                **_settings(args))
    types = ", ".join(args.event_types) if args.event_types else "every event type"
    table = Table(title=f"subscription {added.id} added ({types})", title_justify="left", show_header=False)
    table.add_row("id", added.id)
    table.add_row("signing secret", added.secret)
    table.add_row("", "shown only now: configure your receiver with it")
    # What was stored (the URL as normalised, the types sorted, the limits with
    # their defaults), not what was typed; the secret beside it, once.
    return Done({**_stored(conn, added.id), "secret": added.secret}, table)


def _list(ops: Ops | None, conn: psycopg.Connection[Any], args: argparse.Namespace) -> Done:
    from onceonly_app.webhooks.subscriptions import list_all

    rows = list_all(conn, args.tenant, include_deleted=args.include_deleted)
    table = Table(title=f"webhook subscriptions: {len(rows)}", title_justify="left")
    for column in ("id", "tenant", "url", "event types", "limits", "state"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["id"], row["tenant_id"] or "-", row["url"], _types_cell(row["event_types"]),
                      _limits_cell(row), _state_cell(row))
    return Done({"subscriptions": rows}, table)


def _show(ops: Ops | None, conn: psycopg.Connection[Any], args: argparse.Namespace) -> Done:
    from onceonly_app.webhooks.subscriptions import show

    row = show(conn, args.webhook_id)
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


def _update(ops: Ops | None, conn: psycopg.Connection[Any], args: argparse.Namespace) -> Done:
    from onceonly_app.webhooks.subscriptions import configure, update

    settings = _settings(args)
    core = (args.url, args.event_types, args.max_in_flight, args.rate)
    changed: dict[str, Any] = {}
    if any(value is not None for value in core) or args.all_event_types or not settings:
        changed = update(conn, args.webhook_id, url=args.url, event_types=args.event_types,
                         all_event_types=args.all_event_types, max_in_flight=args.max_in_flight,
                         rate_per_second=args.rate, actor=args.actor, **_sender_checks())
    if settings:  # the subscription's own settings: a change of their own in the audit ("configure")
        changed.update(configure(conn, args.webhook_id, actor=args.actor, **settings))
    text = "; ".join(f"{field}: {json.dumps(c['from'])} -> {json.dumps(c['to'])}" for field, c in changed.items())
    return Done({**_stored(conn, args.webhook_id), "changed": changed},
                f"{args.webhook_id}: {text or 'nothing changed'} (applies to events from now on)")


def _rotate_secret(ops: Ops | None, conn: psycopg.Connection[Any], args: argparse.Namespace) -> Done:
    from onceonly_app.webhooks.subscriptions import DEFAULT_OVERLAP, rotate_secret

    overlap = DEFAULT_OVERLAP if args.overlap is None else args.overlap
    secret = rotate_secret(conn, args.webhook_id, overlap=overlap, actor=args.actor, secret=args.secret)
    return Done({"id": args.webhook_id, "secret": secret, "overlap": overlap},
                f"{args.webhook_id}: new signing secret (shown only now): {secret}\n"
                f"the old secret keeps signing beside it for {overlap:g} s")


def _disable(ops: Ops | None, conn: psycopg.Connection[Any], args: argparse.Namespace) -> Done:
    from onceonly_app.webhooks.subscriptions import disable

    changed = disable(conn, args.webhook_id, args.reason, actor=args.actor)
    return Done({"id": args.webhook_id, "changed": changed, "reason": args.reason},
                f"{args.webhook_id}: {'disabled' if changed else 'was disabled already'}; its events are held")


def _enable(ops: Ops | None, conn: psycopg.Connection[Any], args: argparse.Namespace) -> Done:
    from onceonly_app.webhooks.subscriptions import HOLD_RETENTION, enable

    assert ops is not None  # STORE_ACTIONS: the command opened the store
    retention = HOLD_RETENTION if args.retention is None else args.retention
    done = enable(conn, ops.store.queue(ops.queue_name), args.webhook_id, retention=retention, actor=args.actor)
    return Done({"id": args.webhook_id, "released": done.released, "expired": done.expired},
                f"{args.webhook_id}: enabled; {len(done.released)} held deliveries queued in order, "
                f"{len(done.expired)} expired (held longer than {retention:g} s)")


def _delete(ops: Ops | None, conn: psycopg.Connection[Any], args: argparse.Namespace) -> Done:
    from onceonly_app.webhooks.subscriptions import delete

    dropped = delete(conn, args.webhook_id, actor=args.actor)
    return Done({"id": args.webhook_id, "dropped": dropped},
                f"{args.webhook_id}: deleted; {len(dropped)} unfinished deliveries dropped")


def _secret(ops: Ops | None, conn: psycopg.Connection[Any], args: argparse.Namespace) -> Done:
    from onceonly_app.webhooks.subscriptions import current_secret

    secret = current_secret(conn, args.webhook_id, actor=args.actor)
    return Done({"id": args.webhook_id, "secret": secret}, secret)


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """The subscription's own settings named on the command line (none: {})."""
    settings: dict[str, Any] = {}
    if getattr(args, "clear_headers", False):
        settings["headers"] = {}
    if args.headers:
        names = [name.lower() for name, _ in args.headers]
        if len(names) != len(set(names)):
            raise ValueError("a header is named twice (names are case-insensitive)")
        settings["headers"] = dict(args.headers)
    for name in ("description", "metadata"):
        if getattr(args, name) is not None:
            settings[name] = getattr(args, name)
    return settings


def _header(text: str) -> tuple[str, str]:
    from onceonly_app.webhooks.endpoint_settings import parse_header

    try:
        return parse_header(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _attempts(ops: Ops | None, conn: psycopg.Connection[Any], args: argparse.Namespace) -> Done:
    from onceonly_app.webhooks.attempts import attempt_history

    rows = attempt_history(conn, args.webhook_id, delivery_id=args.delivery, limit=args.limit)
    table = Table(title=f"attempts of {args.webhook_id}" + (f", delivery {args.delivery}" if args.delivery else "")
                  + f": {len(rows)} (newest first)", title_justify="left")
    for column in ("time", "delivery (webhook-id)", "attempt", "outcome", "code", "latency ms", "error"):
        table.add_column(column)
    for row in rows:
        outcome = row["outcome"] if row["recorded"] else f"{row['outcome']} (refused: stale holder)"
        table.add_row(_iso(row["started_at"]), row["delivery_id"], f"{row['generation']}.{row['attempt'] or '-'}",
                      outcome, str(row["response_code"] or "-"), f"{row['latency_ms']:g}", (row["error"] or "")[:60])
    return Done({"id": args.webhook_id, "delivery": args.delivery, "attempts": rows}, table)


def _recover(ops: Ops | None, conn: psycopg.Connection[Any], args: argparse.Namespace) -> Done:
    from onceonly_app.webhooks import recovery

    assert ops is not None  # STORE_ACTIONS: the command opened the store
    run = recovery.replay if args.action == "replay" else recovery.recover
    done = run(conn, ops.store.queue(ops.queue_name), args.webhook_id, args.since, args.until, actor=args.actor)
    before = ", ".join(f"{status}: {n}" for status, n in sorted(done.previous.items())) or "none"
    return Done({"id": args.webhook_id, "requeued": done.count, "previous": dict(done.previous),
                 "deliveries": done.delivery_ids},
                f"{args.webhook_id}: {done.count} deliveries queued again in event order, same webhook-ids "
                f"(they were {before})")


def _moment(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 time, got {text!r}") from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give the time zone too (e.g. {text}Z), got {text!r}")
    return moment


def _contact(ops: Ops | None, conn: psycopg.Connection[Any], args: argparse.Namespace) -> Done:
    from onceonly_app.webhooks.endpoint_health import set_contact

    email = None if args.none else args.email
    if not set_contact(conn, args.tenant, email):
        raise ValueError(f"unknown tenant {args.tenant!r}: billing has no settings row for it")
    return Done({"tenant_id": args.tenant, "contact_email": email},
                f"{args.tenant}: operational e-mails go to {email}" if email else
                f"{args.tenant}: no operational e-mail is sent")


STORE_ACTIONS = frozenset({"enable", "recover", "replay"})  # the others need only the domain database
ACTIONS: dict[str, Callable[[Ops | None, psycopg.Connection[Any], argparse.Namespace], Done]] = {
    "add": _add, "list": _list, "show": _show, "update": _update, "rotate-secret": _rotate_secret,
    "disable": _disable, "enable": _enable, "delete": _delete, "secret": _secret,
    "attempts": _attempts, "recover": _recover, "replay": _recover, "contact": _contact,
}


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


def subscriptions_command(args: argparse.Namespace) -> int:
    if getattr(args, "actor", "") is None:
        args.actor = default_actor()
    if args.action in STORE_ACTIONS:
        with open_ops(args.database, args.store) as ops, ops.pool.connection() as conn:
            conn.autocommit = True  # each action commits its own transaction (enable before it queues)
            done = _run(ops, conn, args)
    else:
        database_url, _store = existing_targets(args.database, args.store)
        check_database(database_url)
        with psycopg.connect(database_url, autocommit=True, connect_timeout=5) as conn:
            done = _run(None, conn, args)
    if args.json:
        print(json.dumps(done.data, indent=2, sort_keys=True, default=_json_value))
    else:
        Console(soft_wrap=True).print(done.text)
    return 0


def _run(ops: Ops | None, conn: psycopg.Connection[Any], args: argparse.Namespace) -> Done:
    """The action, with every error it can meet as one line."""
    from onceonly_app.webhooks.subscriptions import SubscriptionDeletedError

    try:
        return ACTIONS[args.action](ops, conn, args)
    except (LookupError, SubscriptionDeletedError, ValueError) as exc:  # UnknownSubscriptionError among them
        raise CliError(str(exc)) from None
    except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn) as exc:
        raise missing_tables(exc) from None
    except (psycopg.Error, onceonly.OnceOnlyError) as exc:
        raise CliError(f"subscriptions {args.action} failed: {str(exc).splitlines()[0]}") from None
