"""`onceonly simulate`: its options become a SimulationConfig; simulate.run does
the run; the report goes out as tables or JSON (and --report HTML)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..errors import CliError
from .options import non_negative_float, positive_int, rate, store_options

NAME = "simulate"


def register(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        NAME, help="run the real functions as N replicas under duplicates and crashes")
    store_options(parser, "postgresql, redis or dynamodb (a fresh local stand-in), all (each in turn), "
                          "redis-cluster (a local 6-node Redis Cluster)")
    parser.add_argument("--events", type=positive_int, default=200, help="webhook events to feed (default 200)")
    parser.add_argument("--replicas", type=positive_int, default=4,
                        help="execution environments per function (default 4)")
    parser.add_argument("--receiver-latency", type=non_negative_float, default=0.005, metavar="SECONDS",
                        help="the receiver's delay per request (default 0.005)")
    parser.add_argument("--failure-rate", type=rate, default=0.1, metavar="P",
                        help="share of receiver responses that are 500s (default 0.1)")
    parser.add_argument("--crash-rate", type=rate, default=0.1, metavar="P",
                        help="chance that a replica is SIGKILLed during an invocation (default 0.1)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument("--stall-limit", type=positive_int, default=20, metavar="SECONDS",
                        help="give up (and fail) once no work has progressed for this long (default 20)")
    parser.add_argument("--time-limit", type=positive_int, default=300, metavar="SECONDS",
                        help="give up (and fail) if the work is not finished by then, progressing or not "
                             "(default 300)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of tables")
    parser.add_argument("--report", type=Path, metavar="FILE.html", help="also write an HTML report with charts")
    parser.add_argument("--log-dir", type=Path, metavar="DIR",
                        help="keep the replicas' logs in DIR (default: a temporary folder, removed at the end)")
    parser.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                        help="the functions' POWERTOOLS_LOG_LEVEL (default WARNING)")
    return parser


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from .. import simulate

    report = simulate.run(simulate.SimulationConfig(
        database=args.database, store=args.store, events=args.events, replicas=args.replicas,
        receiver_latency=args.receiver_latency, failure_rate=args.failure_rate, crash_rate=args.crash_rate,
        seed=args.seed, stall_limit=args.stall_limit, time_limit=args.time_limit, log_dir=args.log_dir,
        log_level=args.log_level))
    if args.report:
        try:
            args.report.write_text(report.html(), encoding="utf-8")
        except OSError as exc:
            raise CliError(f"cannot write the report to {args.report}: {exc.strerror}") from None
    if args.json:
        print(json.dumps(report.data, indent=2, sort_keys=True))
    else:
        report.print(Console())
    return report.exit_code
