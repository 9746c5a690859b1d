"""Cold imports: how long each of the seven handlers takes to import on a
cold start, from the layer `sam build` makes, with its byte-compiled modules
(what ships) against the same layer without them (what shipped before: /opt
is read-only on Lambda, so every cold start compiled every module again).

Each import runs in a fresh python3.13 process the way Lambda's runtime loads
a handler: the function's folder and the layer's python/ on sys.path, nothing
else (``-I -S``: no site-packages), nothing written (``-B``: like /opt).
Modes alternate, repetition by repetition. Target: every handler ≤ 0.5 s,
compiled.

Alone (about two minutes): ``python -m bench.cold_imports [--repeat N]``
prints the section of docs/benchmarks.md it measured; ``--write FILE``
replaces that section in FILE."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from onceonly_cli.local.project import project_root

SECTION = "## Cold imports, per handler"
TARGET_SECONDS = 0.5
REPEAT = 5  # imports per handler and mode
MODES = ("cold", "compiled")  # without the layer's .pyc files, with them
HANDLERS = ("schema_migration", "webhook_dispatch", "webhook_retry", "payment_watcher", "overdue_invoices",
            "recurring_billing", "notifications")
PYENV_VERSIONS = "3.11.7:3.12.1:3.13.0"  # sam build and the imports need python3.13 on PATH
# What the template gives every function, as far as an import reads it (settings are read at import).
ENVIRONMENT = {
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_METRICS_NAMESPACE": "onceonly", "POWERTOOLS_LOG_LEVEL": "INFO",
    "DATABASE_URL_SECRET": "arn:aws:secretsmanager:us-east-1:123456789012:secret:db",
    "ONCEONLY_STORE_URL": "dynamodb://table?region=us-east-1", "SES_FROM_ADDRESS": "billing@onceonly.dev",
    "SES_IDENTITY_ARN": "arn:aws:ses:us-east-1:123456789012:identity/onceonly.dev",
    "PAYMENTS_API_URL": "https://horizon.stellar.org", "WEBHOOK_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/1/q",
    "PAYMENTS_ACCEPTED_ASSETS": "USD=USDC:GA5ZSEJYB37JRC5AVCIA5MOP4RHTM335X2KGX3IHOJAPP5RE34K4KZVN",
}
IMPORT = ("import sys, time\n"
          "sys.path[0:0] = [sys.argv[1], sys.argv[2]]\n"
          "started, cpu = time.perf_counter(), time.process_time()\n"
          "import app\n"
          "print(time.perf_counter() - started, time.process_time() - cpu)\n")


def _env() -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "PYENV_VERSION": os.environ.get("PYENV_VERSION", PYENV_VERSIONS),
            "HOME": os.environ.get("HOME", "/root"), "SAM_CLI_TELEMETRY": "0", **ENVIRONMENT}


def build_layers(directory: Path) -> dict[str, Path]:
    """``sam build`` of the template; the layer as built, and a copy without .pyc."""
    sam = project_root() / ".venv-sam" / "bin" / "sam"
    result = subprocess.run([str(sam) if sam.exists() else "sam", "build", "--build-dir", str(directory / "build"),
                             "--cache-dir", str(directory / "cache")], cwd=project_root(), env=_env(),
                            capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"sam build failed: {result.stderr[-2000:]}")
    compiled = directory / "build" / "OnceOnlyLayer" / "python"
    cold = directory / "cold" / "python"
    shutil.copytree(compiled, cold, ignore=shutil.ignore_patterns("__pycache__"))
    return {"compiled": compiled, "cold": cold}


def import_seconds(handler: str, layer: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one cold import of ``handler``'s module."""
    result = subprocess.run(["python3.13", "-I", "-S", "-B", "-c", IMPORT, str(project_root() / "functions" / handler),
                             str(layer)], env=_env(), capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"importing {handler} failed: {result.stderr[-2000:]}")
    wall, cpu = result.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def run(repeat: int = 5) -> list[dict[str, Any]]:
    """``repeat`` imports of each handler in each mode: one run entry each."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="onceonly-cold-") as scratch:
        layers = build_layers(Path(scratch))
        for n in range(repeat):
            for handler in HANDLERS:
                for mode in MODES if n % 2 == 0 else reversed(MODES):
                    wall, cpu = import_seconds(handler, layers[mode])
                    runs.append({"section": "cold_imports", "handler": handler, "mode": mode, "repetition": n,
                                 "seconds": cpu, "wall_seconds": wall, "load": os.getloadavg()[0]})
    return runs


def medians(runs: list[dict[str, Any]], value: str = "seconds") -> dict[tuple[str, str], float]:
    seconds: dict[tuple[str, str], list[float]] = {}
    for r in runs:
        if r["section"] == "cold_imports":
            seconds.setdefault((r["handler"], r["mode"]), []).append(r.get(value, r["seconds"]))
    return {key: statistics.median(values) for key, values in seconds.items()}


def section(runs: list[dict[str, Any]]) -> list[str]:
    """docs/benchmarks.md's section: one row per handler, both modes side by side."""
    found, wall = medians(runs), medians(runs, "wall_seconds")
    if not found:
        return []
    mine = [r for r in runs if r["section"] == "cold_imports"]
    count = len(mine) // len(found)
    loads = sorted(r.get("load", 0.0) for r in mine)
    rows = []
    for handler in HANDLERS:
        cold, compiled = found.get((handler, "cold")), found.get((handler, "compiled"))
        if cold is None or compiled is None:
            continue
        verdict = "yes" if compiled <= TARGET_SECONDS else "**NO**"
        rows.append(f"| {handler} | {cold * 1000:,.0f} | {compiled * 1000:,.0f} | {cold / compiled:.2f}x | "
                    f"{verdict} | {wall[handler, 'cold'] * 1000:,.0f} | {wall[handler, 'compiled'] * 1000:,.0f} |")
    return [SECTION, "",
            "Each handler imported by a fresh python3.13 process as Lambda's runtime loads it (its folder and the "
            "layer's python/ on sys.path, no site-packages, nothing written, as on the read-only /opt), from the "
            "layer `sam build` makes (schema_migration's module loads only the standard library: it loads the "
            "layer inside its handler, to answer even when the layer cannot load): **compiled** is that layer "
            "(every module byte-compiled for python3.13 by layer/Makefile), "
            "**cold** the same files without their .pyc, as the layer shipped before. Median "
            f"of {count} imports per cell, the two modes alternating. Target: each handler at most "
            f"{TARGET_SECONDS * 1000:.0f} ms compiled. `python -m bench.cold_imports` measures this section alone. "
            "The judged figures are the import's CPU time (user + system, `time.process_time`): what the import "
            "costs a cold Lambda, which has its CPU to itself. Wall time is beside them: it adds the waits for "
            f"a core, and this machine's 1-minute load average during these imports was {loads[0]:.1f} to "
            f"{loads[-1]:.1f} on {os.cpu_count()} cores (other work shared it).",
            "", "| handler | cold CPU ms | compiled CPU ms | x faster | compiled ≤ 500 ms | cold wall ms | "
            "compiled wall ms |", "|---|---|---|---|---|---|---|",
            *rows, ""]


def replace_section(path: Path, lines: list[str]) -> None:
    """Put ``lines`` in place of the section of the same title in ``path`` (or before "## Method")."""
    text = path.read_text(encoding="utf-8")
    block = "\n".join(lines).rstrip() + "\n\n"
    if SECTION in text:
        start = text.index(SECTION)
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start] + block + (text[end + 1:] if end != -1 else "")
    elif "\n## Method" in text:
        at = text.index("\n## Method") + 1
        text = text[:at] + block + text[at:]
    else:
        text = text.rstrip() + "\n\n" + block
    path.write_text(text.rstrip() + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cold_imports", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=REPEAT)
    parser.add_argument("--write", type=Path, help="replace the section in this file (docs/benchmarks.md)")
    args = parser.parse_args(argv)
    lines = section(run(args.repeat))
    print("\n".join(lines))
    if args.write:
        replace_section(args.write, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
