"""PNG charts of one run (matplotlib, no display needed): medians with
min-max error bars."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

from bench.sizes import STORES, Sizes  # noqa: E402
from bench.summary import Figure, figures  # noqa: E402

NAMES = {"postgresql": "PostgreSQL", "redis": "Redis", "dynamodb": "DynamoDB (dynalite)"}


def _errors(values: list[Figure]) -> list[list[float]]:
    return [[f.median - f.low for f in values], [f.high - f.median for f in values]]


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def claims_chart(runs: list[dict[str, Any]], sizes: Sizes, path: Path) -> None:
    """Items/s at the headline batch by process count, one panel per store."""
    rates = figures(runs, "claims", ("store", "method", "batch", "processes"))
    fig, axes = plt.subplots(1, len(STORES), figsize=(15, 5.5))
    for ax, store in zip(axes, STORES, strict=True):
        methods = list(dict.fromkeys(m for (s, m, b, _) in rates if s == store and b == sizes.headline_batch))
        width = 0.8 / max(1, len(methods))
        for i, method in enumerate(methods):
            points = [(n, rates[(store, method, sizes.headline_batch, n)]) for n in sizes.processes
                      if (store, method, sizes.headline_batch, n) in rates]
            xs = [sizes.processes.index(n) + i * width for n, _ in points]
            ax.bar(xs, [f.median for _, f in points], width, yerr=_errors([f for _, f in points]), label=method)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(sizes.processes))], [str(p) for p in sizes.processes])
        ax.set_xlabel("processes")
        ax.set_ylabel("items/s (median, min-max)")
        ax.set_title(f"{NAMES[store]}, batch {sizes.headline_batch}")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    _save(fig, path)


def backlog_chart(runs: list[dict[str, Any]], path: Path) -> None:
    """Per store: claims that take due items (solid) and claims that find nothing due (dashed)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for value, style, what in (("claim_ms", "-", "due items"), ("empty_claim_ms", "--", "nothing due")):
        cost = figures(runs, "backlog", ("store", "backlog"), value)
        for number, store in enumerate(STORES):
            points = sorted((b, f) for (s, b), f in cost.items() if s == store)
            if points:
                ax.errorbar([b for b, _ in points], [f.median for _, f in points],
                            yerr=_errors([f for _, f in points]), marker="o", capsize=3, linestyle=style,
                            color=f"C{number}", label=f"{NAMES[store]}, {what}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("items queued (most not yet due)")
    ax.set_ylabel("ms per claim call (median)")
    ax.set_title("Claim cost against backlog")
    ax.legend(fontsize=7)
    _save(fig, path)


def replicas_chart(runs: list[dict[str, Any]], path: Path) -> None:
    rates = sorted(figures(runs, "replicas", ("replicas",)).items())
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if rates:
        counts = [n for (n,), _ in rates]
        ax.errorbar(counts, [f.median for _, f in rates], yerr=_errors([f for _, f in rates]), marker="o",
                    capsize=3, label="measured")
        base = next((f for (n,), f in rates if n == 1), None)
        if base:
            ax.plot(counts, [base.median * n for n in counts], linestyle="--", label="linear from 1 replica")
    ax.set_xlabel("replicas")
    ax.set_ylabel("deliveries/s")
    ax.set_title("onceonly simulate, 50 ms receiver")
    ax.legend()
    _save(fig, path)


def draw(runs: list[dict[str, Any]], sizes: Sizes, out: Path) -> dict[str, str]:
    """Write the charts into ``out``; {file name: title}."""
    charts = {"bench-claims.png": "claim + ack items/s per store",
              "bench-backlog.png": "claim cost against backlog",
              "bench-replicas.png": "delivery throughput against replicas"}
    claims_chart(runs, sizes, out / "bench-claims.png")
    backlog_chart(runs, out / "bench-backlog.png")
    replicas_chart(runs, out / "bench-replicas.png")
    return charts
