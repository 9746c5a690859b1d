"""Redis servers of one test's own, on free 127.0.0.1 ports, for what the shared
server must not see: counting commands, a primary and replica to fail over,
a SIGKILL. Each is stopped by its PID when the test ends."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis

from onceonly_cli.testing.servers import free_port, redis_server_binary, wait_for_port

SYNC_TIMEOUT = 20.0


@dataclass
class RedisProcess:
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5, decode_responses=True)

    def kill(self) -> None:
        """SIGKILL, by PID: no shutdown, no last word to its replicas."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def reset_stats(self) -> None:
        with self.client() as client:
            client.config_resetstat()

    def evalsha_calls(self) -> int:
        """EVALSHA commands the server ran since it started or reset_stats()."""
        with self.client() as client:
            stats = client.info("commandstats")
        return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))

    def replicate(self, primary_port: int) -> None:
        """Become a replica of 127.0.0.1:primary_port and wait until the initial
        sync is done on both sides (the primary counts it for WAIT only once it
        is "online")."""
        with self.client() as client, redis.Redis(host="127.0.0.1", port=primary_port,
                                                  socket_timeout=5, decode_responses=True) as primary:
            client.replicaof("127.0.0.1", primary_port)
            deadline = time.monotonic() + SYNC_TIMEOUT
            while not (client.info("replication").get("master_link_status") == "up"
                       and primary.info("replication").get("slave0", {}).get("state") == "online"):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"replica on {self.port} did not sync with {primary_port}")
                time.sleep(0.05)


    def promote(self) -> None:
        """REPLICAOF NO ONE: the failover step a Sentinel or ElastiCache would take."""
        with self.client() as client:
            client.replicaof("NO", "ONE")

    def caught_up_with(self, primary: RedisProcess) -> None:
        """Wait until this replica has applied everything ``primary`` has written so far."""
        with primary.client() as source, self.client() as client:
            target = int(source.info("replication")["master_repl_offset"])
            deadline = time.monotonic() + SYNC_TIMEOUT
            while int(client.info("replication").get("slave_repl_offset", -1)) < target:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"replica on {self.port} did not reach offset {target}")
                time.sleep(0.05)


@contextmanager
def private_redis(*server_args: str) -> Iterator[RedisProcess]:
    """A fresh redis-server on a free loopback port, nothing persisted, with
    ``server_args`` added (e.g. ``"--maxmemory-policy", "volatile-lru"``)."""
    with tempfile.TemporaryDirectory(prefix="onceonly-test-redis-") as workdir:
        port = free_port()
        process = subprocess.Popen(
            [redis_server_binary(), "--bind", "127.0.0.1", "--port", str(port), "--save", "",
             "--appendonly", "no", "--dir", workdir,
             # a replica's first sync starts at once, not after 5 s of waiting for others
             "--repl-diskless-sync-delay", "0", *server_args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        server = RedisProcess(port, process)
        try:
            wait_for_port(port, process, "redis-server")
            yield server
        finally:
            server.kill()
