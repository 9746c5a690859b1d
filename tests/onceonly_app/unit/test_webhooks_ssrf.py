"""The SSRF guard refuses internal targets before any connection is made, and
the sender connects to the very address that was checked (no DNS rebinding).

Name resolution is faked and socket.connect is patched: these tests never send
a packet to anything but 127.0.0.1."""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from onceonly_app.runtime.budget import Budget
from onceonly_app.webhooks.sender import WebhookSender
from onceonly_app.webhooks.signing import new_secret, signed_headers
from onceonly_app.webhooks.ssrf import UnresolvableHostError, UnsafeTargetError, check_target
from onceonly_cli.testing.receiver import WebhookReceiver
from tests.support.servers.trickle import TrickleProxy

REAL_GETADDRINFO = socket.getaddrinfo
REAL_CONNECT = socket.socket.connect


def _answer(address: str, port: int) -> tuple[Any, ...]:
    ip = ipaddress.ip_address(address)
    if ip.version == 6:
        return (socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0))
    return (socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))


class FakeDNS:
    """Answers names from a script (one answer list per lookup; the last repeats);
    IP literals resolve to themselves. Records every name lookup."""

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers
        self.lookups: list[str] = []

    def __call__(self, host: str, port: Any, *args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
        port = int(port or 0)
        try:
            ipaddress.ip_address(host)
            return [_answer(host, port)]
        except ValueError:
            pass
        self.lookups.append(host)
        script = self.answers.get(host)
        if script is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        answer = script[min(self.lookups.count(host), len(script)) - 1]
        return [_answer(a, port) for a in answer]


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every socket connect is recorded; one to a non-loopback address is blocked
    before the system call (ConnectionRefusedError), so nothing leaves the machine."""
    seen: list[Any] = []

    def guarded_connect(sock: socket.socket, address: Any) -> Any:
        seen.append(address)
        host = address[0] if isinstance(address, tuple) else None
        if host is None or not ipaddress.ip_address(host).is_loopback:
            raise ConnectionRefusedError(f"test guard: refused to connect to {address!r}")
        return REAL_CONNECT(sock, address)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    yield seen


def _dns(monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[list[str]]]) -> FakeDNS:
    fake = FakeDNS(answers)
    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return fake


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("10.1.2.3", "private"),
        ("172.16.0.9", "private"),
        ("192.168.1.1", "private"),
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("169.254.169.254", "link-local"),  # the cloud metadata service
        ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("100.64.0.1", "not globally routable"),  # carrier-grade NAT
        ("::ffff:127.0.0.1", "IPv4-mapped IPv6 address of 127.0.0.1 \\(loopback\\)"),
        ("::ffff:169.254.169.254", "IPv4-mapped IPv6 address of 169.254.169.254 \\(link-local\\)"),
        ("::ffff:93.184.216.34", "IPv4-mapped IPv6 address of 93.184.216.34"),
        ("2002:a00:1::", "IPv6 address embedding 10.0.0.1 \\(private\\)"),  # 6to4
        ("64:ff9b::a9fe:a9fe", "embedding 169.254.169.254"),  # NAT64
    ],
)
def test_internal_addresses_are_refused_before_connecting(
    monkeypatch: pytest.MonkeyPatch, connects: list[Any], address: str, reason: str
) -> None:
    dns = _dns(monkeypatch, {"hooks.example.com": [[address]]})
    sender = WebhookSender(1, 1)
    with pytest.raises(UnsafeTargetError, match=reason):
        target = check_target("https://hooks.example.com/in")
        sender.post(target, "{}", {})
    assert dns.lookups == ["hooks.example.com"]
    assert connects == []


def test_one_internal_address_among_public_ones_refuses_the_url(
    monkeypatch: pytest.MonkeyPatch, connects: list[Any]
) -> None:
    _dns(monkeypatch, {"multi.example.com": [["93.184.216.34", "10.0.0.7"]]})
    with pytest.raises(UnsafeTargetError, match="10.0.0.7: private"):
        check_target("https://multi.example.com/")
    assert connects == []


def test_ip_literal_urls_are_checked_too(monkeypatch: pytest.MonkeyPatch, connects: list[Any]) -> None:
    _dns(monkeypatch, {})
    with pytest.raises(UnsafeTargetError, match="link-local"):
        check_target("https://169.254.169.254/latest/meta-data/")
    with pytest.raises(UnsafeTargetError, match="loopback"):
        check_target("https://[::1]:8443/")
    assert connects == []


@pytest.mark.parametrize("url", ["http://hooks.example.com/", "ftp://hooks.example.com/", "hooks.example.com"])
def test_https_is_required_without_the_allow_list(
    monkeypatch: pytest.MonkeyPatch, connects: list[Any], url: str
) -> None:
    dns = _dns(monkeypatch, {"hooks.example.com": [["93.184.216.34"]]})
    with pytest.raises(UnsafeTargetError, match="https is required|no host"):
        check_target(url)
    assert dns.lookups == [] and connects == []


def test_credentials_in_the_url_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _dns(monkeypatch, {"hooks.example.com": [["93.184.216.34"]]})
    with pytest.raises(UnsafeTargetError, match="credentials"):
        check_target("https://user:pw@hooks.example.com/")


def test_the_allow_list_permits_http_and_loopback_for_named_hosts_only(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    _dns(monkeypatch, {"localhost": [["127.0.0.1"]], "other.test": [["127.0.0.1"]]})
    target = check_target("http://localhost:8080/hooks?x=1", allow_http_hosts={"localhost"})
    assert (target.scheme, target.host, target.port, target.address) == ("http", "localhost", 8080, "127.0.0.1")
    assert target.pinned_url == "http://127.0.0.1:8080/hooks?x=1"
    assert target.host_header == "localhost:8080"
    with pytest.raises(UnsafeTargetError, match="https is required"):
        check_target("http://other.test/", allow_http_hosts={"localhost"})
    with pytest.raises(UnsafeTargetError, match="loopback"):
        check_target("https://other.test/", allow_http_hosts={"localhost"})


def test_public_https_target_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    _dns(monkeypatch, {"hooks.example.com": [["2606:2800:220:1:248:1893:25c8:1946"]]})
    target = check_target("https://Hooks.Example.com./in")
    assert target.host == "hooks.example.com" and target.port == 443
    assert target.pinned_url == "https://[2606:2800:220:1:248:1893:25c8:1946]:443/in"
    assert target.host_header == "hooks.example.com"


def test_dns_rebinding_the_connection_goes_to_the_checked_address(
    monkeypatch: pytest.MonkeyPatch, connects: list[Any]
) -> None:
    """The first answer is public and passes; every later answer is the metadata
    service. The name is resolved once, and the only connect attempt is to the
    checked public address (blocked by the test guard before any packet)."""
    dns = _dns(monkeypatch, {"rebind.example.com": [["93.184.216.34"], ["169.254.169.254"]]})
    target = check_target("https://rebind.example.com/hook")
    result = WebhookSender(1, 1).post(target, "{}", {})
    assert result.status_code is None and "connection failed" in (result.error or "")
    assert dns.lookups == ["rebind.example.com"]
    assert [a[0] for a in connects] == ["93.184.216.34"]


def test_dns_rebinding_end_to_end_on_loopback(monkeypatch: pytest.MonkeyPatch, connects: list[Any]) -> None:
    """An allow-listed name resolves to the receiver on 127.0.0.1 once, then to an
    internal address: the request still reaches the receiver, with the real Host."""
    secret = new_secret()
    with WebhookReceiver() as rx:
        url = rx.endpoint("rebind", secret)
        port = int(url.split(":")[2].split("/")[0])
        dns = _dns(monkeypatch, {"rebind.test": [["127.0.0.1"], ["10.0.0.1"]]})
        target = check_target(f"http://rebind.test:{port}/rebind", allow_http_hosts={"rebind.test"})
        headers = signed_headers(secret, "msg_r", '{"a":1}', time.time())
        result = WebhookSender(2, 5).post(target, '{"a":1}', headers)
        assert result.status_code == 200
        (request,) = rx.history()
    assert request.verified and request.host == f"rebind.test:{port}"
    assert dns.lookups == ["rebind.test"]
    assert {a[0] for a in connects} == {"127.0.0.1"}


# -- TLS: the certificate and SNI are checked against the real host name ----------
def _self_signed(tmp: Path, name: str) -> tuple[Path, Path]:
    cert, key = tmp / f"{name}.pem", tmp / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={name}",
         "-addext", f"subjectAltName=DNS:{name}", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return cert, key


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[int, Path, list[str]]]:
    """An HTTPS server on 127.0.0.1 with a certificate for hooks.test only; it
    records the SNI name each client sent."""
    import ssl

    cert, key = _self_signed(tmp_path, "hooks.test")
    sni: list[str] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.sni_callback = lambda sock, name, ctx: sni.append(name)  # type: ignore[assignment,misc]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(204)
            self.send_header("X-Seen-Host", self.headers.get("Host", ""))
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return

    server = HTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], cert, sni
    server.shutdown()
    server.server_close()


def test_tls_uses_the_host_name_for_sni_and_the_certificate(
    monkeypatch: pytest.MonkeyPatch, connects: list[Any], tls_server: tuple[int, Path, list[str]]
) -> None:
    port, cert, sni = tls_server
    _dns(monkeypatch, {"hooks.test": [["127.0.0.1"]], "wrong.test": [["127.0.0.1"]]})
    sender = WebhookSender(2, 5, ca_bundle=str(cert))
    target = check_target(f"https://hooks.test:{port}/in", allow_http_hosts={"hooks.test"})
    result = sender.post(target, "{}", {})
    assert result.status_code == 204, result.error
    assert sni == ["hooks.test"]
    assert {a[0] for a in connects} == {"127.0.0.1"}
    # the same server under another name: the certificate check refuses it
    wrong = check_target(f"https://wrong.test:{port}/in", allow_http_hosts={"wrong.test"})
    refused = sender.post(wrong, "{}", {})
    assert refused.status_code is None and "SSLError" in (refused.error or "")


def test_a_trickled_tls_handshake_is_cut_off_at_the_attempt_deadline(
    monkeypatch: pytest.MonkeyPatch, connects: list[Any], tls_server: tuple[int, Path, list[str]]
) -> None:
    """The server's handshake bytes come one per 20 ms through a proxy: no single
    read waits long, but the handshake (certificate included) would take a minute."""
    port, cert, _ = tls_server
    _dns(monkeypatch, {"hooks.test": [["127.0.0.1"]]})
    bound = 1.0
    with TrickleProxy(port, gap=0.02) as proxy:
        target = check_target(f"https://hooks.test:{proxy.port}/in", allow_http_hosts={"hooks.test"})
        started = time.monotonic()
        result = WebhookSender(2, 5, ca_bundle=str(cert), attempt_timeout=bound).post(target, "{}", {})
        elapsed = time.monotonic() - started
    assert (result.status_code, result.error) == (None, "timeout: the attempt's deadline passed")
    assert elapsed < 2 * bound
    assert proxy.connections == 1


def test_a_hanging_dns_lookup_ends_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """getaddrinfo cannot be interrupted; the lookup is abandoned at the deadline
    (and refused as unresolvable, which the service retries like a refused connect)."""
    released = threading.Event()

    def hanging(host: str, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        released.wait(30)
        return []

    bound = 0.5
    started = time.monotonic()
    with pytest.raises(UnresolvableHostError, match="deadline"):
        check_target("https://slow-dns.example.com/", resolver=hanging, deadline=Budget.after(bound))
    assert time.monotonic() - started < 2 * bound
    released.set()


@pytest.mark.parametrize(("url", "threaded"), [("https://hooks.example.com/", True), ("https://8.8.8.8/", False),
                                               ("https://[2001:4860:4860::8888]:8443/", False)])
def test_only_a_host_name_is_looked_up_in_a_thread_of_its_own(url: str, threaded: bool) -> None:
    """An address literal needs no lookup: it is resolved in the caller's thread
    (getaddrinfo parses it at once); a name in a thread the deadline can abandon."""
    lookups: list[bool] = []

    def resolver(host: str, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        lookups.append(threading.current_thread() is not threading.main_thread())
        return socket.getaddrinfo("8.8.8.8" if threaded else host, port, type=socket.SOCK_STREAM)

    check_target(url, resolver=resolver, deadline=Budget.after(5))
    assert lookups == [threaded]


def test_a_dns_failure_within_the_deadline_is_reported_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    dns = _dns(monkeypatch, {})
    with pytest.raises(UnresolvableHostError, match="Name or service not known"):
        check_target("https://nowhere.example.com/", deadline=Budget.after(5))
    assert dns.lookups == ["nowhere.example.com"]
