"""`onceonly invoke`: `sam local invoke` without a container. The function runs in
a child process with the template's environment, the local store URLs and a
context whose remaining time comes from the template's Timeout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CliError, read_user_file
from .template import FunctionSpec, TemplateError, find_function

# Set by the Lambda runtime; handlers and Powertools read some of them.
GRACE_SECONDS = 5.0  # the child may need a moment to import before the handler starts


@dataclass(frozen=True)
class InvokeResult:
    response: Any
    exit_code: int  # 0 ok, 1 the handler raised, 2 load failure, 3 timed out


def read_json_file(path: Path, what: str = "event file") -> Any:
    text = read_user_file(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"{what} {path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None


def read_env_vars(path: Path | None, logical_id: str) -> dict[str, str]:
    """SAM's --env-vars format: {"Parameters": {...}, "<LogicalId>": {...}}; the
    function's own section wins over Parameters."""
    if path is None:
        return {}
    data = read_json_file(path, "env-vars file")
    if not isinstance(data, dict):
        raise CliError(f"env-vars file {path} must hold a JSON object")
    merged: dict[str, str] = {}
    for section in ("Parameters", logical_id):
        values = data.get(section) or {}
        if not isinstance(values, dict):
            raise CliError(f"env-vars file {path}: {section!r} must be an object of strings")
        merged.update({str(k): str(v) for k, v in values.items()})
    return merged


def function_spec(template: Path, logical_id: str) -> FunctionSpec:
    try:
        spec = find_function(template, logical_id)
    except TemplateError as exc:
        raise CliError(str(exc)) from None
    if not spec.code_dir.is_dir():
        raise CliError(f"{logical_id}: CodeUri folder {spec.code_dir} does not exist")
    return spec


def lambda_environment(spec: FunctionSpec, extra: dict[str, str]) -> dict[str, str]:
    """The child's environment: this process's, then the runtime's variables, the
    template's plain values, and ``extra`` (store URLs, --env-vars) on top."""
    env = dict(os.environ)
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
    env.update(
        AWS_LAMBDA_FUNCTION_NAME=spec.logical_id,
        AWS_LAMBDA_FUNCTION_MEMORY_SIZE=str(spec.memory_mb),
        AWS_LAMBDA_FUNCTION_TIMEOUT=str(int(spec.timeout)),
        AWS_REGION=region,
        AWS_DEFAULT_REGION=region,
    )
    env.setdefault("POWERTOOLS_TRACE_DISABLED", "true")  # no X-Ray daemon here
    env.update(spec.environment)
    env.update(extra)
    # The layer's content is importable as in Lambda's /opt/python.
    paths = [str(p) for p in spec.layers] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run_function(spec: FunctionSpec, event_path: Path, env: dict[str, str]) -> InvokeResult:
    """Invoke once in a child process; kill it when the template's Timeout passes."""
    with tempfile.TemporaryDirectory(prefix="onceonly-invoke-") as tmp:
        result_path = Path(tmp) / "result.json"
        args = [sys.executable, "-m", "onceonly_cli.local.invoke_child", str(spec.code_dir), spec.handler,
                spec.logical_id, str(spec.timeout), str(spec.memory_mb), str(event_path), str(result_path)]
        # stdin: a pipe only this process holds open; the child ends when it reads EOF (this process died).
        child = subprocess.Popen(args, env=env, stdin=subprocess.PIPE)
        try:
            code = child.wait(timeout=spec.timeout + GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            message = f"Task timed out after {spec.timeout:.2f} seconds"
            return InvokeResult({"errorMessage": message, "errorType": "TimeoutError"}, 3)
        except BaseException:
            child.kill()  # Ctrl-C, SIGTERM, SIGHUP: leave nothing running
            child.wait()
            raise
        finally:
            if child.stdin is not None:
                child.stdin.close()
        if not result_path.exists():
            message = f"the function's process exited with code {code} without a response"
            return InvokeResult({"errorMessage": message, "errorType": "Runtime.ExitError"}, 2)
        return InvokeResult(json.loads(result_path.read_text(encoding="utf-8")), code)
