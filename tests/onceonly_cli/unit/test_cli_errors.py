"""Every command of the CLI: an expected failure (the store or the database
refusing or going away, also mid-run; a server that cannot start) is one line
on stderr and exit code 1; anything else is a bug and keeps its traceback."""

from __future__ import annotations

import argparse

import psycopg
import psycopg_pool
import pytest

import onceonly
from onceonly_cli import main as cli_main
from onceonly_cli.errors import CliError
from onceonly_cli.testing.servers import ServerSetupError

COMMANDS = [
    ["simulate"],
    ["invoke", "SomeFunction", "--event", "event.json"],
    ["status"],
    ["redrive", "--all"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: argv[0])
@pytest.mark.parametrize(
    ("error", "line"),
    [
        (onceonly.StoreUnavailableError("Redis store unreachable during depth: Error 111\nsecond line"),
         "Redis store unreachable during depth: Error 111"),
        (onceonly.StoreNotReadyError("table missing; run store.setup()"), "table missing; run store.setup()"),
        (onceonly.ConfigError("WEBHOOK_CLAIM_BATCH must be >= 1"), "WEBHOOK_CLAIM_BATCH must be >= 1"),
        (psycopg.OperationalError("consuming input failed: server closed the connection\nDETAIL: x"),
         "database error: consuming input failed: server closed the connection"),
        (psycopg_pool.PoolTimeout("couldn't get a connection after 10.00 sec"),
         "database error: couldn't get a connection after 10.00 sec"),
        (ServerSetupError("dynalite not found: run `npm ci`"), "dynalite not found: run `npm ci`"),
        (CliError("bad store URL"), "bad store URL"),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else "",
)
def test_expected_failures_are_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                        argv: list[str], error: Exception, line: str) -> None:
    def failing_run(args: argparse.Namespace) -> int:
        raise error

    monkeypatch.setattr(cli_main, "_run", failing_run)
    assert cli_main.main(argv) == 1
    err = capsys.readouterr().err
    assert err == f"onceonly {argv[0]}: error: {line}\n"


def test_cli_error_keeps_its_exit_code(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def failing_run(args: argparse.Namespace) -> int:
        raise CliError("invariant broken", exit_code=3)

    monkeypatch.setattr(cli_main, "_run", failing_run)
    assert cli_main.main(["status"]) == 3
    assert capsys.readouterr().err == "onceonly status: error: invariant broken\n"


@pytest.mark.parametrize("bug", [AttributeError("'NoneType' has no attribute 'x'"), KeyError("k"),
                                 psycopg.errors.SyntaxError("syntax error at or near")])
def test_bugs_keep_their_traceback(monkeypatch: pytest.MonkeyPatch, bug: Exception) -> None:
    """A programming error (a SQL syntax error included) is not dressed up as a user error."""
    def failing_run(args: argparse.Namespace) -> int:
        raise bug

    monkeypatch.setattr(cli_main, "_run", failing_run)
    with pytest.raises(type(bug)):
        cli_main.main(["status"])
