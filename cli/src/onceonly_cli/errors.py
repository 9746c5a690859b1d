"""The failures the command line turns into a one-line message and an exit code
(its own CliError, and the store or database failing under it), and the reading
of files the user names, which fails in such one-liners."""

from __future__ import annotations

import sys
from pathlib import Path

from onceonly.errors import OnceOnlyError

from .local.project import ProjectNotFoundError
from .testing.servers import ServerSetupError


class CliError(Exception):
    """A user-facing failure: ``str(exc)`` is printed as one line on stderr."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def read_user_file(path: Path, what: str, error: type[Exception] = CliError) -> str:
    """The text of a file the user named (``what``: "event file", "template" ...),
    or ``error`` with a one-line reason."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{what} {path} not found") from None
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}") from None


def expected_failure(exc: BaseException) -> str | None:
    """The one-line message of a failure the user can act on: a CliError, the
    coordination store or the domain database refusing or going away (also in
    the middle of a run), a server that cannot start, no project folder. None for anything else,
    which is a bug and keeps its traceback."""
    if isinstance(exc, (CliError, ServerSetupError, ProjectNotFoundError, OnceOnlyError)):
        return _first_line(exc)  # onceonly's messages name the store and the operation
    # Only a process that imported psycopg can be failing inside it.
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(exc, psycopg.OperationalError):
        return f"database error: {_first_line(exc)}"
    return None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
