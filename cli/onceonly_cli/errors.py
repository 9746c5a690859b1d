"""The one exception the command line turns into a one-line message and an exit code,
and the reading of files the user names, which fails in such one-liners."""

from __future__ import annotations

from pathlib import Path


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
