"""`onceonly subscriptions ACTION WEBHOOK_ID`: disable, enable or delete a webhook
subscription (onceonly_app.webhooks.subscriptions does the work; this is the
wiring). One function per action in ACTIONS: a new action is a new entry."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import psycopg

import onceonly

from .errors import CliError
from .ops import Ops, missing_tables, open_ops

DEFAULT_REASON = "disabled by an operator"


def add_subscriptions_parser(commands: Any, store_options: Callable[[argparse.ArgumentParser, str], None],
                             non_negative_float: Callable[[str], float]) -> None:
    subscriptions = commands.add_parser("subscriptions", help="disable, enable or delete a webhook subscription")
    actions = subscriptions.add_subparsers(dest="action", required=True, metavar="ACTION")
    disable = actions.add_parser("disable", help="stop sending; its events are held until it is enabled")
    disable.add_argument("--reason", default=DEFAULT_REASON, help=f"why (default: {DEFAULT_REASON!r})")
    enable = actions.add_parser("enable", help="send again: the held events go out in order")
    enable.add_argument("--retention", type=non_negative_float, default=None, metavar="SECONDS",
                        help="held events older than this are expired, not sent (default 604800: 7 days)")
    actions.add_parser("delete", help="soft-delete: no more events; unfinished deliveries end dropped")
    for action in actions.choices.values():
        action.add_argument("webhook_id", metavar="WEBHOOK_ID")
        store_options(action, "postgresql or redis (the local server)")


def _disable(ops: Ops, conn: psycopg.Connection[Any], args: argparse.Namespace) -> str:
    from onceonly_app.webhooks.subscriptions import disable

    changed = disable(conn, args.webhook_id, args.reason)
    return f"{args.webhook_id}: {'disabled' if changed else 'was disabled already'}; its events are held"


def _enable(ops: Ops, conn: psycopg.Connection[Any], args: argparse.Namespace) -> str:
    from onceonly_app.webhooks.subscriptions import HOLD_RETENTION, enable

    retention = HOLD_RETENTION if args.retention is None else args.retention
    done = enable(conn, ops.store.queue(ops.queue_name), args.webhook_id, retention=retention)
    return (f"{args.webhook_id}: enabled; {len(done.released)} held deliveries queued in order, "
            f"{len(done.expired)} expired (held longer than {retention:g} s)")


def _delete(ops: Ops, conn: psycopg.Connection[Any], args: argparse.Namespace) -> str:
    from onceonly_app.webhooks.subscriptions import delete

    dropped = delete(conn, args.webhook_id)
    return f"{args.webhook_id}: deleted; {len(dropped)} unfinished deliveries dropped"


ACTIONS: dict[str, Callable[[Ops, psycopg.Connection[Any], argparse.Namespace], str]] = {
    "disable": _disable, "enable": _enable, "delete": _delete,
}


def subscriptions_command(args: argparse.Namespace) -> int:
    from onceonly_app.webhooks.subscriptions import SubscriptionDeletedError, UnknownSubscriptionError

    with open_ops(args.database, args.store) as ops, ops.pool.connection() as conn:
        conn.autocommit = True  # each action commits its own transaction (enable before it queues)
        try:
            print(ACTIONS[args.action](ops, conn, args))
        except (UnknownSubscriptionError, SubscriptionDeletedError, ValueError) as exc:
            raise CliError(str(exc)) from None
        except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn) as exc:
            raise missing_tables(exc) from None
        except (psycopg.Error, onceonly.OnceOnlyError) as exc:
            raise CliError(f"subscriptions {args.action} failed: {str(exc).splitlines()[0]}") from None
    return 0
