"""The report on the terminal: rich tables, the verdict first."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from .report import scenario_rows


def mark(ok: bool) -> str:
    return "[green]ok[/]" if ok else "[bold red]BROKEN[/]"


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]], **options: Any) -> Table:
    """A left-titled table; columns whose name starts with ">" are right-aligned."""
    result = Table(title=title, title_justify="left", **options)
    for column in columns:
        result.add_column(column.lstrip(">"), justify="right" if column.startswith(">") else "left")
    for row in rows:
        result.add_row(*(str(cell) for cell in row))
    return result


def print_report(report: dict[str, Any], console: Console) -> None:
    wh, lat = report["webhooks"], report["latency_ms"]
    console.print(table("invariants (exactly-once, then the domain scenarios)", ("invariant", "result", "detail"),
                         ((i["name"], mark(i["ok"]), i["detail"]) for i in report["invariants"])))
    rows = [
        ("events in", wh["events_in"]),
        ("SQS messages (duplicates + redeliveries)", wh["messages_sent"]),
        ("deliberate duplicate messages", wh["duplicate_messages"]),
        ("deliveries made", wh["deliveries_made"]),
        ("dead letters (deliveries)", wh["dead_letters"]),
        ("SQS dead-letter queue: redriven at the end / parked after", f"{wh['sqs_redriven']} / {wh['sqs_parked']}"),
        ("lost deliveries", wh["lost_deliveries"]),
        ("receiver requests / cut attempts", f"{wh['receiver_requests']} / {wh['cut_attempts']}"),
        ("duplicate 2xx POSTs, same webhook-id", wh["duplicate_posts"]),
        ("replicas killed / restarted", f"{report['replicas']['killed']} / {report['replicas']['restarted']}"),
        ("leases reclaimed", report["leases_reclaimed"]),
        ("fenced writes refused", report["fenced_writes_refused"]),
        ("throughput", f"{report['throughput_per_second']} deliveries/s"),
        ("latency p50 / p99", f"{lat['p50']} ms / {lat['p99']} ms"),
        ("duration", f"{report['duration_seconds']} s"),
    ]
    console.print(table("run", ("measure", ">value"), rows, show_header=False))
    if wh["duplicates_by_webhook_id"]:
        console.print(table("webhook-ids the receiver accepted more than once", ("webhook-id", ">2xx"),
                             list(wh["duplicates_by_webhook_id"].items())[:10]))
    if report["cron"]["ticks"]:
        console.print(table(
            "cron ticks (each must run once)", ("job", "tick", "deliveries", "outcomes", "once"),
            ((t["job"], t["tick"], t["deliveries"], ", ".join(f"{k} {v}" for k, v in sorted(t["statuses"].items())),
              mark(t["ok"])) for t in report["cron"]["ticks"])))
    if report["cron"]["effects"]:
        console.print(table(
            "cron effects (one set)", ("job", "effect", "expected", "actual", "result"),
            ((e["job"], e["what"], e["expected"], e["actual"], mark(e["ok"])) for e in report["cron"]["effects"])))
    payments = report.get("payments")
    if payments:
        paid = [(e["what"], e["expected"], e["actual"], mark(e["ok"])) for e in payments["effects"]]
        paid.append(("invoice.paid deliveries received (+ dead-lettered)", payments["invoice_paid_deliveries"],
                     payments["invoice_paid_received"], mark(payments["invoice_paid_ok"])))
        console.print(table("payments (each applied once; invoice.paid once per subscription)",
                             ("effect", "expected", "actual", "result"), paid))
    seeded = scenario_rows(report.get("scenarios") or {})
    if seeded:
        console.print(table("domain scenarios seeded", ("what", "seeded"), seeded))
    verdict = ("[bold green]every invariant held, exactly-once and domain[/]" if report["ok"]
               else "[bold red]an invariant broke[/]")
    console.print(verdict)
