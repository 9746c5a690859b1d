"""`onceonly subscriptions ACTION …`: manage webhook subscriptions without SQL
(add, list, show, update, rotate-secret, secret, disable, enable, delete,
recover, replay, attempts, contact). The options of each action become one
local.subscriptions.Request; local.subscriptions does the rest."""

from __future__ import annotations

import argparse
import dataclasses
import json
from datetime import datetime
from typing import Any

from ..local.subscriptions import DEFAULT_REASON
from .options import LOCAL_KEYWORDS, non_negative_float, store_options

NAME = "subscriptions"


def run(args: argparse.Namespace) -> int:
    from ..local.subscriptions import Request, manage

    fields = {f.name for f in dataclasses.fields(Request)}
    request = Request(**{name: value for name, value in vars(args).items() if name in fields and value is not None})
    return manage(request, args.database, args.store, as_json=args.json)


def register(subparsers: Any) -> argparse.ArgumentParser:
    subscriptions: argparse.ArgumentParser = subparsers.add_parser(
        NAME, help="manage webhook subscriptions: add, list, show, update, rotate-secret, secret, disable, "
                   "enable, delete, recover, replay, attempts, contact")
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
    who.add_argument("--none", dest="no_email", action="store_true", help="send no operational e-mail")
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
        store_options(action, LOCAL_KEYWORDS)
    return subscriptions


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


def _moment(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 time, got {text!r}") from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give the time zone too (e.g. {text}Z), got {text!r}")
    return moment


def _event_types(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]
