"""TLS verification is always on (docs/security.md): no code in the deployed
tree turns it off, and every client the functions use refuses an endpoint on
127.0.0.1 whose certificate is self-signed: the webhook sender, the payments
API client, the boto3 clients, the custom resource's answer to CloudFormation
and a ``rediss://`` store. Each refusal happens in the handshake: the server
never sees a request. Trusting the same certificate makes the sender and the
payments client get through, so the refusal is about trust, not a broken server."""

from __future__ import annotations

import ast
import json
import ssl
import subprocess
import threading
import urllib.error
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import botocore.exceptions
import pytest
import requests

import onceonly
from onceonly_app.billing.payments_api import PaymentsApiError, PaymentsClient
from onceonly_app.runtime.aws import bounded_client
from onceonly_app.webhooks.sender import WebhookSender
from onceonly_app.webhooks.ssrf import check_target
from tests.support import REPO_ROOT
from tests.support.deploy.built_schema_function import source_custom_resource

DEPLOYED = [REPO_ROOT / "src", REPO_ROOT / "app" / "src", REPO_ROOT / "functions"]


@dataclass
class SelfSignedServer:
    url: str
    cert: Path
    requests: list[str] = field(default_factory=list)  # "METHOD path" of every request that got through


@pytest.fixture
def self_signed(tmp_path: Path) -> Iterator[SelfSignedServer]:
    """HTTPS on 127.0.0.1 with a self-signed certificate valid for that address."""
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append(f"{self.command} {self.path}")
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps({"_embedded": {"records": []}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = _answer  # noqa: N815 - http.server's naming

        def log_message(self, *args: object) -> None:
            return

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.handle_error = lambda *args: None  # type: ignore[method-assign] # refused handshakes are the point
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield SelfSignedServer(f"https://127.0.0.1:{server.server_address[1]}", cert, seen)
    finally:
        server.shutdown()
        server.server_close()


def test_the_webhook_sender_refuses_a_self_signed_endpoint(self_signed: SelfSignedServer) -> None:
    target = check_target(f"{self_signed.url}/hook", allow_http_hosts={"127.0.0.1"})
    refused = WebhookSender(2, 5).post(target, "{}", {})
    assert refused.status_code is None and "SSLCertVerificationError" in (refused.error or ""), refused
    assert self_signed.requests == []
    trusted = WebhookSender(2, 5, ca_bundle=str(self_signed.cert)).post(target, "{}", {})
    assert trusted.status_code == 200 and self_signed.requests == ["POST /hook"]


def test_the_payments_client_refuses_a_self_signed_api(self_signed: SelfSignedServer) -> None:
    with pytest.raises(PaymentsApiError, match="CERTIFICATE_VERIFY_FAILED"):
        PaymentsClient(self_signed.url).page("now")
    assert self_signed.requests == []
    session = requests.Session()
    session.trust_env = False  # else REQUESTS_CA_BUNDLE, when set, replaces session.verify
    session.verify = str(self_signed.cert)
    assert PaymentsClient(self_signed.url, session=session).page("now").payments == []
    assert len(self_signed.requests) == 2  # the root resource (how far it ingested), then the page


def test_boto3_clients_refuse_a_self_signed_endpoint(self_signed: SelfSignedServer) -> None:
    sqs = bounded_client("sqs", endpoint_url=self_signed.url, region_name="us-east-1")
    with pytest.raises(botocore.exceptions.SSLError):
        sqs.list_queues()
    assert self_signed.requests == []


def test_the_answer_to_cloudformation_refuses_a_self_signed_response_url(self_signed: SelfSignedServer) -> None:
    event = {"ResponseURL": f"{self_signed.url}/cfn", "StackId": "s", "RequestId": "r", "LogicalResourceId": "l"}
    with pytest.raises(urllib.error.URLError) as raised:
        source_custom_resource().Responder(event).send("SUCCESS")
    assert isinstance(raised.value.reason, ssl.SSLCertVerificationError)
    assert self_signed.requests == []


def test_a_rediss_store_refuses_a_self_signed_server(self_signed: SelfSignedServer) -> None:
    store = onceonly.connect(self_signed.url.replace("https://", "rediss://") + "/0?timeout=5")
    # a configuration error, not an outage: no retry makes the certificate verify
    with pytest.raises(onceonly.ConfigError) as raised:
        store.inspect("tls-probe")
    chain, exc = [], raised.value
    while exc is not None:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    assert any("CERTIFICATE_VERIFY_FAILED" in str(e) or isinstance(e, ssl.SSLCertVerificationError) for e in chain)
    store.close()


# -- the deployed code never turns verification off ---------------------------------------------------------

def verification_switched_off(source: str) -> list[str]:
    """Every place in ``source`` that disables certificate or host-name checks."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.keyword) and node.arg in ("verify", "check_hostname") and \
                isinstance(node.value, ast.Constant) and node.value.value is False:
            found.append(f"line {node.value.lineno}: {node.arg}=False")
        elif isinstance(node, ast.keyword) and node.arg == "ssl_cert_reqs" and isinstance(node.value, ast.Constant) \
                and node.value.value in (None, "none", "optional"):
            found.append(f"line {node.value.lineno}: ssl_cert_reqs={node.value.value!r}")
        elif isinstance(node, ast.Attribute) and node.attr in ("CERT_NONE", "CERT_OPTIONAL",
                                                               "_create_unverified_context", "disable_warnings"):
            found.append(f"line {node.lineno}: {node.attr}")
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value is False \
                and any(isinstance(t, ast.Attribute) and t.attr in ("check_hostname", "verify") for t in node.targets):
            found.append(f"line {node.lineno}: assigns False to check_hostname/verify")
    sslmodes = ("sslmode=disable", "sslmode=allow", "sslmode=prefer", "sslmode=require")
    found += [f"{mode} in a string" for mode in sslmodes if mode in source]
    return found


def test_no_deployed_code_switches_verification_off() -> None:
    files = [path for root in DEPLOYED for path in sorted(root.rglob("*.py"))]
    assert len(files) > 40
    found = {str(path.relative_to(REPO_ROOT)): hits for path in files
             if (hits := verification_switched_off(path.read_text(encoding="utf-8")))}
    assert found == {}


@pytest.mark.parametrize("line", [
    "requests.get(url, verify=False)", "boto3.client('sqs', verify=False)", "ctx.check_hostname = False",
    "ctx.verify_mode = ssl.CERT_NONE", "ssl._create_unverified_context()", "redis.Redis(ssl_cert_reqs='none')",
    "urllib3.disable_warnings()", "URL = 'postgresql://h/db?sslmode=require'",
])
def test_the_scan_finds_each_way_of_switching_it_off(line: str) -> None:
    assert verification_switched_off(line)
