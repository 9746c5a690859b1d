"""A throwaway certificate authority made with ``openssl`` for one test: a CA,
and a server certificate it signed for 127.0.0.1 (an IP SAN, so hostname
checking holds). A second, unrelated CA is the "wrong CA" a client may be
given."""

from __future__ import annotations

import subprocess
from pathlib import Path

from onceonly_cli.testing.redis_cluster import Tls


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_ca(folder: Path, name: str) -> tuple[Path, Path]:
    """(certificate, key) of a new self-signed CA."""
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    # Python's strict verification wants a CA's key usage stated
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-keyout", str(key), "-out", str(cert))
    return cert, key


def server_tls(folder: Path) -> Tls:
    """A CA and a certificate for 127.0.0.1 that it signed."""
    ca_cert, ca_key = make_ca(folder, "onceonly-test-ca")
    key, request, cert = folder / "server.key", folder / "server.csr", folder / "server.crt"
    extensions = folder / "server.ext"
    extensions.write_text("subjectAltName = IP:127.0.0.1\nextendedKeyUsage = serverAuth, clientAuth\n"
                          "keyUsage = critical, digitalSignature, keyEncipherment\n"
                          "authorityKeyIdentifier = keyid,issuer\nsubjectKeyIdentifier = hash\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", str(key),
             "-out", str(request))
    _openssl("x509", "-req", "-in", str(request), "-CA", str(ca_cert), "-CAkey", str(ca_key), "-CAcreateserial",
             "-days", "2", "-extfile", str(extensions), "-out", str(cert))
    return Tls(cert=cert, key=key, ca=ca_cert)
