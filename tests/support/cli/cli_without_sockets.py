"""The `onceonly` command with every connect of a Python socket refused (an
audit hook), for tests that must show a command only checks an address and
never connects to it. The database is unaffected: libpq connects in C.

    python -m tests.support.cli.cli_without_sockets subscriptions add ..."""

from __future__ import annotations

import sys
from typing import Any

from onceonly_cli.main import main


def _refuse_connects(event: str, args: tuple[Any, ...]) -> None:
    if event == "socket.connect":
        raise PermissionError(f"a socket connect was attempted: {args[1]!r}")


if __name__ == "__main__":
    sys.addaudithook(_refuse_connects)
    sys.exit(main(sys.argv[1:]))
