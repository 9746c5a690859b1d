"""The Redis store over TLS (``rediss://``), on a single redis-server and on a
Redis Cluster with TLS between clients and nodes (as ElastiCache Serverless
always is). The server certificate comes from a throwaway CA made with
openssl for each module; verification is on by default, so a server signed by
another CA is refused with a ConfigError and nothing is written."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import onceonly
from onceonly_cli.testing.redis_cluster import LocalCluster, Tls
from onceonly_cli.testing.servers import LocalServers, free_port, redis_server_binary, wait_for_port
from tests.support.servers.tls_ca import make_ca, server_tls


@dataclass
class TlsServer:
    tls_port: int
    plain_port: int
    tls: Tls
    wrong_ca: Path

    def url(self, query: str = "") -> str:
        return f"rediss://127.0.0.1:{self.tls_port}?ssl_ca_certs={self.tls.ca}" + (f"&{query}" if query else "")


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> tuple[Tls, Path]:
    folder = tmp_path_factory.mktemp("tls")
    return server_tls(folder / "ca"), make_ca(folder / "wrong", "some-other-ca")[0]


@pytest.fixture(scope="module")
def tls_server(certificates: tuple[Tls, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    """One redis-server with a TLS port and a plain one, stopped by PID."""
    tls, wrong_ca = certificates
    tls_port, plain_port = free_port(), free_port()
    process = subprocess.Popen(
        [redis_server_binary(), "--bind", "127.0.0.1", "--port", str(plain_port), "--tls-port", str(tls_port),
         "--tls-cert-file", str(tls.cert), "--tls-key-file", str(tls.key), "--tls-ca-cert-file", str(tls.ca),
         "--tls-auth-clients", "no", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path_factory.mktemp("redis-tls"))],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(tls_port, process, "redis-server (TLS)")
        yield TlsServer(tls_port, plain_port, tls, wrong_ca)
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="module")
def tls_cluster(certificates: tuple[Tls, Path]) -> Iterator[LocalCluster]:
    servers = LocalServers()
    try:
        yield servers.redis_cluster(tls=certificates[0])
    finally:
        servers.stop()


def _keys(server: TlsServer) -> int:
    import redis

    with redis.Redis(host="127.0.0.1", port=server.plain_port) as client:
        return int(client.dbsize())


def _leases_and_queues_work(url: str, unique: str) -> None:
    store = onceonly.connect(url)
    try:
        store.setup()
        lease = store.acquire(unique, ttl=30)
        assert lease is not None and store.acquire(unique, ttl=30) is None
        queue = store.queue(unique)
        queue.put_many((f"i{n}", None, n) for n in range(10))
        claims = queue.claim(limit=10, lease=30)
        assert sorted(c.payload for c in claims) == list(range(10))
        assert queue.claim(limit=10, lease=30, acks=claims).acked == [True] * 10
        assert store.complete(lease, keep=60)
    finally:
        store.close()


def test_a_single_node_over_tls_verified_against_the_ca_bundle(tls_server: TlsServer, unique: str) -> None:
    _leases_and_queues_work(tls_server.url(f"prefix={unique}"), unique)
    assert _keys(tls_server) > 0


def test_a_cluster_over_tls(tls_cluster: LocalCluster, unique: str) -> None:
    assert tls_cluster.url.startswith("rediss://")
    _leases_and_queues_work(f"{tls_cluster.url}&prefix={unique}", unique)


@pytest.mark.parametrize("ca", ["wrong", "system"])
def test_a_server_certificate_the_ca_did_not_sign_is_refused(tls_server: TlsServer, ca: str) -> None:
    """Verification is on by default: the system's CAs did not sign the test
    CA either. Refused before anything is sent."""
    before = _keys(tls_server)
    query = f"?ssl_ca_certs={tls_server.wrong_ca}" if ca == "wrong" else ""
    store = onceonly.connect(f"rediss://127.0.0.1:{tls_server.tls_port}{query}")
    with pytest.raises(onceonly.ConfigError, match="certificate was not verified.*ssl_ca_certs"):
        store.acquire("job", ttl=30)
    store.close()
    assert _keys(tls_server) == before


def test_a_cluster_with_the_wrong_ca_is_refused(tls_cluster: LocalCluster, certificates: tuple[Tls, Path]) -> None:
    url = tls_cluster.url.replace(str(certificates[0].ca), str(certificates[1]))
    store = onceonly.connect(url)
    with pytest.raises(onceonly.ConfigError, match="certificate was not verified"):
        store.acquire("job", ttl=30)
    store.close()


def test_a_tls_url_at_a_plain_port_fails_fast_and_says_so(tls_server: TlsServer) -> None:
    before = _keys(tls_server)
    store = onceonly.connect(f"rediss://127.0.0.1:{tls_server.plain_port}?ssl_ca_certs={tls_server.tls.ca}&timeout=2")
    with pytest.raises(onceonly.StoreUnavailableError, match="does not speak TLS, use redis://"):
        store.acquire("job", ttl=30)
    store.close()
    assert _keys(tls_server) == before


def test_a_plain_url_at_a_tls_port_says_so(tls_server: TlsServer) -> None:
    store = onceonly.connect(f"redis://127.0.0.1:{tls_server.tls_port}?timeout=2")
    with pytest.raises(onceonly.StoreUnavailableError, match="speaks TLS, use rediss://"):
        store.acquire("job", ttl=30)
    store.close()


@pytest.mark.parametrize(("url", "message"), [
    ("rediss://127.0.0.1:6379?ssl_ca_certs=/nonexistent/ca.pem", "no CA bundle file"),
    ("redis://127.0.0.1:6379?ssl_ca_certs=/etc/hostname", r"only with rediss://"),
])
def test_a_ca_bundle_option_that_cannot_work_is_a_config_error(url: str, message: str) -> None:
    with pytest.raises(onceonly.ConfigError, match=message):
        onceonly.connect(url)
