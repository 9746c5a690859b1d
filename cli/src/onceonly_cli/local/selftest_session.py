"""One `onceonly selftest` session: a bounded multi-process race against the user's own
store, judged by the history checker; exit code 1 on any violation.

It writes only under a run prefix of its own and removes it afterwards
(selftest_targets.py says where, per store). It refuses to run without --yes
against a store that holds other onceonly data: the run's records never touch
that data, but a selftest is load on a store the user's functions rely on."""

from __future__ import annotations

import functools
import os
import tempfile
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

import onceonly

from ..errors import CliError
from . import selftest_targets as targets
from .selftest import SelftestResult, run_selftest
from .selftest_worker import Plan
from .stores import open_store, redact

SHOWN_VIOLATIONS = 10


def run_session(store_url: str | None, *, procs: int, items: int, seconds: float, yes: bool = False,
                history: Path | None = None) -> int:
    """Race ``procs`` processes over ``items`` queue items on ``store_url``
    (None: $ONCEONLY_STORE_URL) for at most ``seconds``, print the verdict; 1 on
    a violation. ``yes``: run even where the store holds other onceonly data;
    ``history``: where to keep the operation history (default: a temporary file)."""
    url = store_url or os.environ.get("ONCEONLY_STORE_URL")
    if not url:
        raise CliError("no store: pass --store URL (postgresql://, redis:// or dynamodb://) "
                       "or set ONCEONLY_STORE_URL")
    if procs < 2:
        raise CliError("--procs must be at least 2: a race needs two processes")
    if targets.scheme(url) not in ("postgresql", "redis", "dynamodb"):
        raise CliError(f"bad store URL {redact(url)!r}: expected postgresql://, redis:// or dynamodb://")
    plan = Plan(targets.new_prefix(), procs=procs, items=items, seconds=seconds)
    run_url = targets.run_url(url, plan.prefix)
    # Connect (and set up, idempotently) first: an unreachable store fails here
    # in one clear line. Where data would be refused, the tables exist already.
    store = open_store(run_url, setup=True)
    other = targets.other_data(url)
    if other and not yes:
        store.close()
        raise CliError(f"{redact(url)} holds other onceonly data ({other}); the selftest writes only "
                       f"under its own {targets.PREFIX}… names and removes them, but it loads the store: "
                       "pass --yes to run it anyway")
    console = Console()
    console.print(f"selftest on {redact(url)}: {plan.procs} processes, {plan.items} items, "
                  f"up to {plan.seconds:g} s, names under {plan.prefix}")
    history = history or Path(tempfile.mkdtemp(prefix="onceonly-selftest-")) / "history.jsonl"
    try:
        result = run_selftest(functools.partial(onceonly.connect, run_url), plan, history)
    finally:
        try:
            targets.cleanup(run_url, store, plan)
        finally:
            store.close()
    render(result, console)
    return 0 if result.passed else 1


def render(result: SelftestResult, console: Console) -> None:
    s = result.summary
    kinds = Counter(v.kind for v in s.violations)
    table = Table(title="onceonly selftest", show_header=False)
    table.add_column("check")
    table.add_column("result", justify="right")
    for label, value in [
        ("workers that won a grant", f"{result.winners} of {result.plan.procs}"),
        ("acquires refused (the workers met)", str(result.contended)),
        ("operations recorded", str(s.ops)),
        ("grants (leases and claims)", str(s.grants)),
        ("items put / acked", f"{s.items} / {s.acked}"),
        ("items lost", str(s.lost)),
        ("duplicate acks", str(s.duplicates)),
        ("double grants (overlapping holds)", str(kinds["overlap"])),
        ("tokens not increasing / granted twice", f"{kinds['token_order']} / {kinds['duplicate_token']}"),
        ("stale writes refused / accepted", f"{s.stale_refused} / {s.stale_accepted}"),
        ("claims left unfinished", str(kinds["unfinished_claim"])),
        ("calls with unknown outcome (errors)", str(s.unknown)),
        ("seconds", f"{result.elapsed:.1f}"),
    ]:
        table.add_row(label, value)
    console.print(table)
    for v in s.violations[:SHOWN_VIOLATIONS]:
        console.print(f"  [red]{v.kind}[/red] {v.name}: {v.detail}", highlight=False)
    if len(s.violations) > SHOWN_VIOLATIONS:
        console.print(f"  … and {len(s.violations) - SHOWN_VIOLATIONS} more")
    for problem in result.stuck:
        console.print(f"  [red]{problem}[/red]")
    console.print(f"history: {result.history}")
    if result.passed:
        console.print("[bold green]PASS[/bold green]: no double grant, nothing lost, tokens increasing, "
                      "stale writes refused")
    elif s.violations:
        console.print(f"[bold red]FAIL[/bold red]: {len(s.violations)} violations")
    elif result.stuck:
        console.print("[bold red]FAIL[/bold red]: workers did not finish")
    else:
        console.print("[bold red]FAIL[/bold red]: fewer than two workers won anything, so they did not race; "
                      "run with more --items or --seconds")
