"""The stand-ins' watcher: stops what a process started when that process dies
without stopping it (SIGKILL, the OOM killer), so that no server is orphaned.

The parent starts one watcher (``python -m onceonly_cli.testing.reaper``) with a pipe
as its stdin; only the parent holds the pipe's write end, so the watcher reads
EOF the moment the parent is gone, however it died. Over the pipe, the parent
names what to stop, one line each:

- ``pid N``: a process it started (redis-server, the dynalite launcher);
- ``postmaster DIR``: an embedded PostgreSQL's data directory (pg_ctl
  daemonizes the postmaster: it is nobody's child here); its pid is read from
  ``DIR/postmaster.pid`` when it is needed;
- ``rmtree DIR``: a temporary directory to remove after the stops;
- ``done``: the parent stopped everything itself: exit and stop nothing.

On EOF without ``done`` the watcher sends each process SIGTERM (the postmaster
SIGQUIT: PostgreSQL's immediate shutdown, which also ends its workers), waits a
little, SIGKILLs what is left, and removes the directories. It runs in a
session of its own, so a Ctrl-C or a signal to the parent's process group does
not end it before the parent's own cleanup has run."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

GRACE = 3.0  # seconds between the polite signal and SIGKILL


class Reaper:
    """The parent's side: start the watcher, tell it what to stop."""

    def __init__(self) -> None:
        read_end, write_end = os.pipe()
        self._proc = subprocess.Popen([sys.executable, "-m", "onceonly_cli.testing.reaper"], stdin=read_end,
                                      stdout=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        os.close(read_end)
        os.set_inheritable(write_end, False)  # no later child may hold the parent's end open
        self._pipe = os.fdopen(write_end, "w", buffering=1, encoding="utf-8")

    @property
    def pid(self) -> int:
        return self._proc.pid

    def watch_process(self, pid: int) -> None:
        self._send(f"pid {pid}")

    def watch_postmaster(self, pgdata: Path) -> None:
        self._send(f"postmaster {pgdata}")

    def remove_later(self, directory: Path) -> None:
        self._send(f"rmtree {directory}")

    def done(self) -> None:
        """Everything was stopped by the parent: the watcher exits doing nothing."""
        if not self._pipe.closed:
            with contextlib.suppress(BrokenPipeError):
                self._pipe.write("done\n")
                self._pipe.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5)

    def _send(self, line: str) -> None:
        self._pipe.write(line + "\n")


def _postmaster_pid(pgdata: Path) -> int | None:
    try:
        return int((pgdata / "postmaster.pid").read_text(encoding="utf-8").split("\n", 1)[0])
    except (OSError, ValueError):
        return None  # never started, or stopped already


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _stop(targets: list[tuple[int, signal.Signals]]) -> None:
    """Send each (pid, signal), then SIGKILL whatever outlives the grace period."""
    for pid, signum in targets:
        _signal(pid, signum)
    deadline = time.monotonic() + GRACE
    while any(_alive(pid) for pid, _ in targets) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid, _ in targets:
        if _alive(pid):
            _signal(pid, signal.SIGKILL)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    pids: list[int] = []
    postmasters: list[Path] = []
    directories: list[Path] = []
    for line in sys.stdin:
        kind, _, value = line.strip().partition(" ")
        if kind == "done":
            return
        if kind == "pid":
            pids.append(int(value))
        elif kind == "postmaster":
            postmasters.append(Path(value))
        elif kind == "rmtree":
            directories.append(Path(value))
    # EOF without "done": the parent died with its stand-ins running.
    targets = [(pid, signal.SIGTERM) for pid in pids]
    targets += [(pid, signal.SIGQUIT) for pid in map(_postmaster_pid, postmasters) if pid is not None]
    _stop(targets)
    for directory in directories:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
