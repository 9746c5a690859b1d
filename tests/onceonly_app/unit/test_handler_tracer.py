"""The handlers build a Powertools Tracer only when the template turns tracing
on: building one imports the X-Ray SDK (with much of botocore), most of a cold import.
Checked in a fresh interpreter, where nothing else imported them yet."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support import REPO_ROOT

PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import app
print(json.dumps({"xray": "aws_xray_sdk.core" in sys.modules, "tracer": type(app.tracer).__name__}))
"""


def _imported(function: str, trace_disabled: str) -> dict[str, object]:
    env = {"PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "us-east-1", "POWERTOOLS_TRACE_DISABLED": trace_disabled}
    result = subprocess.run([sys.executable, "-c", PROBE, str(REPO_ROOT / "functions" / function)], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_without_tracing_the_dispatcher_imports_no_xray() -> None:
    assert _imported("webhook_dispatch", "true") == {"xray": False, "tracer": "_Untraced"}


def test_with_tracing_it_is_powertools_tracer() -> None:
    found = _imported("webhook_retry", "false")
    assert found["tracer"] == "Tracer" and found["xray"] is True


def test_the_stand_in_passes_the_handler_through() -> None:
    from onceonly_app.runtime.tracing import _Untraced

    def handler(event: object, context: object) -> str:
        return "ran"

    assert _Untraced().capture_lambda_handler(handler) is handler
    assert _Untraced().capture_lambda_handler()(handler) is handler
