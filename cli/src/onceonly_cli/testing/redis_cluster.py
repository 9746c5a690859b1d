"""A local Redis Cluster on loopback: 3 primaries and 3 replicas of redis-server
(``--cluster-enabled yes``) on free 127.0.0.1 ports, joined with
``redis-cli --cluster create``; plain TCP, or TLS with a given certificate.
Used by ``onceonly simulate --store redis-cluster`` and by the tests. Nothing
beyond redis-server and redis-cli is needed. The caller owns the processes
(``started``) and stops them by PID."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis

from .servers import ServerSetupError, free_port, redis_server_binary

PORT_ATTEMPTS = 3  # starts of a node whose port was taken before it bound
PRIMARIES = 3
# A failed primary is replaced after this long without an answer (ElastiCache
# uses seconds too; short here so that a failover test does not wait long).
NODE_TIMEOUT_MS = 1000
READY_TIMEOUT = 30.0


@dataclass(frozen=True)
class Tls:
    """Server certificate and key, and the CA bundle that signed it."""

    cert: Path
    key: Path
    ca: Path


@dataclass
class ClusterNodeProcess:
    port: int
    bus_port: int
    process: subprocess.Popen[bytes]
    command: list[str]


@dataclass
class LocalCluster:
    """``start()`` launches the nodes (each handed to ``started``, e.g. to be
    watched and stopped by PID) and joins them."""

    workdir: Path
    started: Callable[[subprocess.Popen[bytes]], None]
    tls: Tls | None = None
    nodes: list[ClusterNodeProcess] = field(default_factory=list)

    @property
    def url(self) -> str:
        """A store URL: any node works as the seed; the client reads the rest."""
        if self.tls is None:
            return f"redis://127.0.0.1:{self.nodes[0].port}?cluster=1"
        return f"rediss://127.0.0.1:{self.nodes[0].port}?cluster=1&ssl_ca_certs={self.tls.ca}"

    def client(self, port: int, timeout: float = 5) -> redis.Redis:
        """A plain client of one node (for admin commands: CLUSTER, INFO)."""
        if self.tls is None:
            return redis.Redis(host="127.0.0.1", port=port, socket_timeout=timeout,
                               socket_connect_timeout=timeout, decode_responses=True)
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=timeout, socket_connect_timeout=timeout,
                           decode_responses=True, ssl=True, ssl_ca_certs=str(self.tls.ca))

    def start(self) -> str:
        started = [self._start_node() for _ in range(2 * PRIMARIES)]
        self.nodes.extend(self._listening(node) for node in started)
        self._create()
        self.wait_ready()
        return self.url

    def _listening(self, node: ClusterNodeProcess) -> ClusterNodeProcess:
        """``node`` once it answers on its port. One that exited first is started
        again on new ports: between free_port and the node's bind, another
        process (a test worker starting its own servers) can take a port."""
        for _ in range(PORT_ATTEMPTS - 1):
            if self._answers(node):
                return node
            node = self._start_node()
        if not self._answers(node):
            raise ServerSetupError(f"redis-server (cluster node) exited {PORT_ATTEMPTS} times before listening "
                                   f"(code {node.process.returncode})")
        return node

    def _answers(self, node: ClusterNodeProcess) -> bool:
        """True once the node itself answers on its port, False if it exited."""
        deadline = time.monotonic() + READY_TIMEOUT
        while node.process.poll() is None:
            if self._serves(node):
                return True
            if time.monotonic() > deadline:
                raise ServerSetupError(f"redis-server (cluster node) did not answer on 127.0.0.1:{node.port} "
                                       f"within {READY_TIMEOUT:.0f}s")
            time.sleep(0.05)
        return False

    def _serves(self, node: ClusterNodeProcess) -> bool:
        """Whether the process answering on the node's port is the node itself:
        an open port alone may be another process's."""
        try:
            with self.client(node.port, timeout=1) as client:
                return int(client.info("server")["process_id"]) == node.process.pid
        except (redis.RedisError, OSError):
            return False

    def _start_node(self) -> ClusterNodeProcess:
        port, bus_port = free_port(), free_port()
        folder = self.workdir / f"node-{port}"
        folder.mkdir(parents=True)
        listen = ["--port", str(port)] if self.tls is None else [
            "--port", "0", "--tls-port", str(port), "--tls-cert-file", str(self.tls.cert),
            "--tls-key-file", str(self.tls.key), "--tls-ca-cert-file", str(self.tls.ca),
            "--tls-auth-clients", "no", "--tls-cluster", "yes", "--tls-replication", "yes"]
        command = [redis_server_binary(), "--bind", "127.0.0.1", *listen, "--cluster-enabled", "yes",
                   "--cluster-port", str(bus_port), "--cluster-config-file", str(folder / "nodes.conf"),
                   "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--save", "", "--appendonly", "no",
                   "--dir", str(folder), "--repl-diskless-sync-delay", "0"]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.started(process)
        return ClusterNodeProcess(port, bus_port, process, command)

    def restart(self, node: ClusterNodeProcess) -> None:
        """Start a stopped node again: its nodes.conf keeps its identity, so it
        rejoins (a primary that was failed over comes back as a replica)."""
        assert node.process.poll() is not None, "the node still runs"
        node.process = subprocess.Popen(node.command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.started(node.process)
        if not self._answers(node):
            raise ServerSetupError(f"redis-server (cluster node) exited with code {node.process.returncode} "
                                   f"on restart: is 127.0.0.1:{node.port} taken?")

    def _create(self) -> None:
        cli = shutil.which("redis-cli")
        if cli is None:
            raise ServerSetupError("redis-cli is needed to join a local cluster: apt-get install redis-tools")
        tls = [] if self.tls is None else ["--tls", "--cacert", str(self.tls.ca)]
        done = subprocess.run(
            [cli, *tls, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
             "--cluster-replicas", "1", "--cluster-yes"],
            capture_output=True, text=True, timeout=60, check=False,
        )
        if done.returncode != 0:
            raise ServerSetupError(f"redis-cli --cluster create failed: {done.stdout[-500:]} {done.stderr[-500:]}")

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Until every live node says the cluster is ok and every replica is in sync."""
        deadline = time.monotonic() + timeout
        while not self._ready():
            if time.monotonic() > deadline:
                raise ServerSetupError(f"the local Redis cluster was not ready within {timeout:.0f}s")
            time.sleep(0.1)

    def _ready(self) -> bool:
        for node in self.live_nodes():
            with self.client(node.port) as client:
                try:
                    if client.cluster("info").get("cluster_state") != "ok":
                        return False
                    replication = client.info("replication")
                except redis.RedisError:
                    return False
                if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
                    return False
        return True

    def live_nodes(self) -> list[ClusterNodeProcess]:
        return [n for n in self.nodes if n.process.poll() is None]

    def role(self, node: ClusterNodeProcess) -> str:
        """"master" or "slave", as the node says now (failovers swap them)."""
        with self.client(node.port) as client:
            return str(client.info("replication")["role"])

    def primaries(self) -> list[ClusterNodeProcess]:
        return [n for n in self.live_nodes() if self.role(n) == "master"]

    def replicas(self) -> list[ClusterNodeProcess]:
        return [n for n in self.live_nodes() if self.role(n) == "slave"]
