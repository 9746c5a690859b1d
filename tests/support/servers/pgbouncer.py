"""A real PgBouncer (Debian's ``pgbouncer`` package) in front of the test
PostgreSQL, on a free loopback port, with its default settings except where it
listens, how it authenticates (trust, as the test server does) and the pool
mode. In particular no ``ignore_startup_parameters``: it refuses startup
``options`` as a stock PgBouncer does. It runs as the ``postgres`` user when
the tests run as root (PgBouncer refuses to run as root)."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

INSTALL_HINT = "install Debian's pgbouncer (apt-get install -y pgbouncer; scripts/test does it when run as root)"
START_TIMEOUT = 10.0
RUN_AS = "postgres"  # PgBouncer will not run as root

CONFIG = """\
[databases]
* = host={pg_host} port={pg_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {auth_file}
pool_mode = {pool_mode}
"""


class PgBouncerError(RuntimeError):
    """PgBouncer is missing or did not start; the message says what to do."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _binary() -> str:
    found = shutil.which("pgbouncer", path=f"{os.environ.get('PATH', '')}:/usr/sbin")
    if found is None:
        raise PgBouncerError(f"pgbouncer is not installed: {INSTALL_HINT}")
    return found


class PgBouncer:
    """``with PgBouncer(server_url, "transaction") as bouncer:`` runs one until
    the block ends; :meth:`url` points a URL of the same server at it. Keyword
    arguments are further ``[pgbouncer]`` settings (``default_pool_size="1"``)."""

    def __init__(self, server_url: str, pool_mode: str = "transaction", **settings: str) -> None:
        parts = urlsplit(server_url)
        if parts.hostname != "127.0.0.1" or parts.port is None:
            raise PgBouncerError(f"the PgBouncer tests need PostgreSQL on 127.0.0.1:PORT (not an embedded one on "
                                 f"a socket), got {server_url!r}: start it, or set ONCEONLY_TEST_POSTGRES_URL")
        self._server = parts
        self._pool_mode = pool_mode
        self._settings = settings  # more [pgbouncer] settings, e.g. default_pool_size="1"
        self.port = _free_port()
        self._dir = Path(tempfile.mkdtemp(prefix="onceonly-pgbouncer-"))
        self._process: subprocess.Popen[bytes] | None = None

    def url(self, url: str, **query: str) -> str:
        """``url`` (a database on the fronted server) through this PgBouncer,
        with ``query`` options appended."""
        parts = urlsplit(url)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@127.0.0.1:{self.port}" if userinfo else f"127.0.0.1:{self.port}"
        extra = "&".join(f"{key}={value}" for key, value in query.items())
        return urlunsplit(parts._replace(netloc=netloc, query="&".join(q for q in (parts.query, extra) if q)))

    def log(self) -> str:
        path = self._dir / "pgbouncer.log"
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    def __enter__(self) -> PgBouncer:
        binary = _binary()
        user = self._server.username or "postgres"
        (self._dir / "userlist.txt").write_text(f'"{user}" ""\n', encoding="utf-8")
        ini = self._dir / "pgbouncer.ini"
        ini.write_text(CONFIG.format(pg_host=self._server.hostname, pg_port=self._server.port, port=self.port,
                                     auth_file=self._dir / "userlist.txt", pool_mode=self._pool_mode)
                       + "".join(f"{key} = {value}\n" for key, value in self._settings.items()),
                       encoding="utf-8")
        as_root = os.geteuid() == 0
        if as_root:
            account = pwd.getpwnam(RUN_AS)
            for path in (self._dir, *self._dir.iterdir()):
                os.chown(path, account.pw_uid, account.pw_gid)
        log = (self._dir / "pgbouncer.log").open("wb")
        self._process = subprocess.Popen([binary, str(ini)], stdout=log, stderr=subprocess.STDOUT,
                                         user=RUN_AS if as_root else None, group=RUN_AS if as_root else None)
        log.close()
        self._wait_listening()
        return self

    def _wait_listening(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self.__exit__()
                raise PgBouncerError(f"pgbouncer exited at start: {self.log()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)  # it binds within milliseconds of starting
        self.__exit__()
        raise PgBouncerError(f"pgbouncer did not listen on 127.0.0.1:{self.port} within {START_TIMEOUT:g} s")

    def __exit__(self, *exc: object) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()  # SIGTERM: PgBouncer's immediate shutdown
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        shutil.rmtree(self._dir, ignore_errors=True)
