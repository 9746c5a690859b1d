"""Render the fault scenarios' results (the JSON lines a soak run wrote) as the
table in docs/reliability.md, between its markers, with the run's date and
command. Every figure comes from the results file; nothing is typed by hand.

    python -m tests.onceonly.faults.table RESULTS.jsonl docs/reliability.md --command "scripts/soak"
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

START, END = "<!-- fault-table:start -->", "<!-- fault-table:end -->"
COLUMNS = ["scenario", "store", "processes", "items", "faults injected", "duplicates", "lost",
           "stale writes accepted", "longest stall"]


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{what} {n}" for what, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _faults(r: dict[str, Any]) -> str:
    total = sum(r["faults"].values())
    if r["scenario"] == "random crash":
        killed = total + r["self_kills"]
        return f"{killed} SIGKILL, where: {_counts(r['kills_by_phase'])}"
    if total:
        return f"{total}: {_counts(r['faults'])}"
    return "clocks skewed (see scenario)" if "skew" in r["scenario"] else "none"


def _duplicates(r: dict[str, Any]) -> str:
    text = str(r["duplicates"])
    if r["repeats"]:
        text += f" (+{r['repeats']} webhooks resent with their own key)"
    return text


def row(r: dict[str, Any]) -> list[str]:
    return [r["scenario"], r["store"], str(r["processes"]), f"{r['items']} + {r['ticks']} ticks", _faults(r),
            _duplicates(r), str(r["lost"]), str(r["stale_accepted"]), f"{r['longest_stall']:.1f} s"]


def render(results: list[dict[str, Any]], command: str) -> str:
    first, last = (datetime.fromisoformat(results[i]["recorded_at"]).astimezone(UTC) for i in (0, -1))
    lines = [f"Run on {first:%Y-%m-%d} with `{command}` (one 2-core machine, shared); scenario results "
             f"recorded from {first:%H:%M} to {last:%H:%M} UTC.", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row(r)) + " |" for r in results]
    return "\n".join(lines)


def replace_table(document: str, table: str) -> str:
    head, _, rest = document.partition(START)
    _, found, tail = rest.partition(END)
    if not found:
        raise SystemExit(f"markers {START} … {END} not found in the document")
    return f"{head}{START}\n{table}\n{END}{tail}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("document", type=Path)
    parser.add_argument("--command", required=True)
    args = parser.parse_args(argv)
    results = [json.loads(line) for line in args.results.read_text(encoding="utf-8").splitlines() if line]
    if not results:
        raise SystemExit(f"{args.results} holds no results: was any soak scenario run?")
    doc = args.document.read_text(encoding="utf-8")
    args.document.write_text(replace_table(doc, render(results, args.command)), encoding="utf-8")


if __name__ == "__main__":
    main()
