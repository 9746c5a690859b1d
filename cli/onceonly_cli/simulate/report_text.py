"""The report on the terminal: rich tables, the verdict first."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _mark(ok: bool) -> str:
    return "[green]ok[/]" if ok else "[bold red]BROKEN[/]"


def print_report(report: dict[str, Any], console: Console) -> None:
    wh, lat = report["webhooks"], report["latency_ms"]
    invariants = Table(title="exactly-once invariants", title_justify="left")
    invariants.add_column("invariant")
    invariants.add_column("result")
    invariants.add_column("detail")
    for inv in report["invariants"]:
        invariants.add_row(inv["name"], _mark(inv["ok"]), inv["detail"])

    summary = Table(title="run", title_justify="left", show_header=False)
    summary.add_column("measure")
    summary.add_column("value", justify="right")
    rows = [
        ("events in", wh["events_in"]),
        ("SQS messages (duplicates + redeliveries)", wh["messages_sent"]),
        ("deliberate duplicate messages", wh["duplicate_messages"]),
        ("deliveries made", wh["deliveries_made"]),
        ("dead letters (deliveries / SQS)", f"{wh['dead_letters']} / {wh['sqs_dead_letters']}"),
        ("lost deliveries", wh["lost_deliveries"]),
        ("receiver requests", wh["receiver_requests"]),
        ("duplicate 2xx POSTs, same webhook-id", wh["duplicate_posts"]),
        ("replicas killed / restarted", f"{report['replicas']['killed']} / {report['replicas']['restarted']}"),
        ("leases reclaimed", report["leases_reclaimed"]),
        ("fenced writes refused", report["fenced_writes_refused"]),
        ("throughput", f"{report['throughput_per_second']} deliveries/s"),
        ("latency p50 / p99", f"{lat['p50']} ms / {lat['p99']} ms"),
        ("duration", f"{report['duration_seconds']} s"),
    ]
    for name, value in rows:
        summary.add_row(name, str(value))

    console.print(invariants)
    console.print(summary)
    if wh["duplicates_by_webhook_id"]:
        dupes = Table(title="webhook-ids the receiver accepted more than once", title_justify="left")
        dupes.add_column("webhook-id")
        dupes.add_column("2xx", justify="right")
        for webhook_id, count in list(wh["duplicates_by_webhook_id"].items())[:10]:
            dupes.add_row(webhook_id, str(count))
        console.print(dupes)
    if report["cron"]["ticks"]:
        ticks = Table(title="cron ticks (each must run once)", title_justify="left")
        for column in ("job", "tick", "deliveries", "outcomes", "once"):
            ticks.add_column(column)
        for t in report["cron"]["ticks"]:
            outcomes = ", ".join(f"{k} {v}" for k, v in sorted(t["statuses"].items()))
            ticks.add_row(t["job"], t["tick"], str(t["deliveries"]), outcomes, _mark(t["ok"]))
        console.print(ticks)
    if report["cron"]["effects"]:
        effects = Table(title="cron effects (one set)", title_justify="left")
        for column in ("job", "effect", "expected", "actual", "result"):
            effects.add_column(column)
        for e in report["cron"]["effects"]:
            effects.add_row(e["job"], e["what"], str(e["expected"]), str(e["actual"]), _mark(e["ok"]))
        console.print(effects)
    payments = report.get("payments")
    if payments:
        table = Table(title="payments (each applied once; invoice.paid once per subscription)",
                      title_justify="left")
        for column in ("effect", "expected", "actual", "result"):
            table.add_column(column)
        for e in payments["effects"]:
            table.add_row(e["what"], str(e["expected"]), str(e["actual"]), _mark(e["ok"]))
        table.add_row("invoice.paid deliveries received (+ dead-lettered)", str(payments["invoice_paid_deliveries"]),
                      str(payments["invoice_paid_received"]),
                      _mark(payments["invoice_paid_deliveries"]
                                   == payments["invoice_paid_received"] + payments["invoice_paid_dead"]))
        console.print(table)
    verdict = ("[bold green]every exactly-once invariant held[/]" if report["ok"]
               else "[bold red]an exactly-once invariant broke[/]")
    console.print(verdict)
