"""`simulate --store all`: one run per store on the same workload, and the
table that puts them side by side (plain JSON-able data, like a report)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from .report_text import mark, table


def build_comparison(reports: list[dict[str, Any]], seed: int) -> dict[str, Any]:
    stores = []
    for report in reports:
        held = sum(1 for i in report["invariants"] if i["ok"])
        stores.append({
            "store": report["config"]["store"], "ok": report["ok"],
            "invariants_held": held, "invariants_total": len(report["invariants"]),
            "broken": [i["name"] for i in report["invariants"] if not i["ok"]],
            "throughput_per_second": report["throughput_per_second"],
            "p50_ms": report["latency_ms"]["p50"], "p99_ms": report["latency_ms"]["p99"],
            "killed": report["replicas"]["killed"], "restarted": report["replicas"]["restarted"],
            "duration_seconds": report["duration_seconds"],
        })
    return {"ok": all(r["ok"] for r in reports), "seed": seed, "stores": stores, "reports": reports}


def print_comparison(comparison: dict[str, Any], console: Console) -> None:
    rows = [(row["store"], mark(row["ok"]), f"{row['invariants_held']}/{row['invariants_total']}",
             row["throughput_per_second"], row["p50_ms"], row["p99_ms"], row["killed"], row["duration_seconds"])
            for row in comparison["stores"]]
    console.print(table(f"stores compared (same workload, seed {comparison['seed']})",
                        ("store", "verdict", ">invariants", ">deliveries/s", ">p50 ms", ">p99 ms", ">killed",
                         ">seconds"), rows))
    for row in comparison["stores"]:
        if row["broken"]:
            console.print(f"[bold red]{row['store']}: broken: {', '.join(row['broken'])}[/]")
    console.print("[bold green]every invariant held on every store[/]" if comparison["ok"]
                  else "[bold red]an invariant broke[/]")
