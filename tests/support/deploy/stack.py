"""The offline deploy checks' tools: template.yaml transformed by
aws-sam-translator (in the SAM venv), linted by cfn-lint, scanned by checkov
(in its own venv), and created as a stack on moto's server on 127.0.0.1."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import zipfile
from functools import cache
from typing import Any

import pytest

from tests.support import REPO_ROOT

REPO = REPO_ROOT
# moto answers a custom resource's ResponseURL in its default region only.
STACK_REGION = "us-east-1"
ACCOUNT = "123456789012"
CODE_BUCKET = "onceonly-code"

BASE_PARAMETERS = {
    "DatabaseUrlSecretArn": f"arn:aws:secretsmanager:{STACK_REGION}:{ACCOUNT}:secret:onceonly-db-AbCdEf",
    "SesIdentityArn": f"arn:aws:ses:{STACK_REGION}:{ACCOUNT}:identity/billing.onceonly.dev",
    "SesFromAddress": "invoices@billing.onceonly.dev",
    "PaymentsApiUrl": "https://payments.example.com",
    "PaymentsAcceptedAssets": "USD=USDC:GA5ZSEJYB37JRC5AVCIA5MOP4RHTM335X2KGX3IHOJAPP5RE34K4KZVN",
}
STORE_SECRET = f"arn:aws:secretsmanager:{STACK_REGION}:{ACCOUNT}:secret:onceonly-store-AbCdEf"


def parameters_for(kind: str, **extra: str) -> dict[str, str]:
    params = {**BASE_PARAMETERS, "StoreKind": kind, **extra}
    if kind != "dynamodb":
        params.setdefault("StoreUrlSecretArn", STORE_SECRET)
    return params


def tool(venv: str, name: str, installer: str) -> str:
    """A dev tool from its own venv (scripts/test installs them there)."""
    path = REPO / venv / "bin" / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found:
        return found
    pytest.fail(f"{name} is missing: run scripts/test (it installs {installer} into {venv})", pytrace=False)


def tool_env() -> dict[str, str]:
    return {**os.environ, "AWS_DEFAULT_REGION": STACK_REGION, "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "SAM_CLI_TELEMETRY": "0"}


@cache
def _transformed_text(parameters: str) -> str:
    python = tool(".venv-sam", "python", "aws-sam-cli (and aws-sam-translator)")
    result = subprocess.run(
        [python, str(REPO / "tests/support/deploy/sam_transform.py"), str(REPO / "template.yaml"), CODE_BUCKET,
         parameters],
        capture_output=True, text=True, env=tool_env(), timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def transformed(parameters: dict[str, str]) -> dict[str, Any]:
    """The CloudFormation template SAM would deploy with these parameters."""
    return json.loads(_transformed_text(json.dumps(parameters, sort_keys=True)))


def upload_code(s3: Any, template: dict[str, Any]) -> None:
    """What `sam package` does: every function's and layer's zip in the bucket."""
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("app.py", "def handler(event, context):\n    return {}\n")
    s3.create_bucket(Bucket=CODE_BUCKET)  # idempotent in us-east-1
    for resource in template["Resources"].values():
        code = resource.get("Properties", {}).get("Code") or resource.get("Properties", {}).get("Content")
        if isinstance(code, dict) and "S3Key" in code:
            s3.put_object(Bucket=CODE_BUCKET, Key=code["S3Key"], Body=archive.getvalue())
