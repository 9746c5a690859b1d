"""The schema custom resource as CloudFormation drives it: the real
SchemaMigrationFunction on the layer ``sam build`` made, run in a Python 3.13
subprocess (the layer's wheels are built for it) by run_built_handler.py, one
request per invocation, answering a local ResponseURL."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.support.deploy.stack import REPO, tool, tool_env

SOURCE = REPO / "functions" / "schema_migration"
RUNNER = Path(__file__).with_name("run_built_handler.py")
PYENV_VERSIONS = "3.11.7:3.12.1:3.13.0"  # sam build for python3.13 needs that interpreter on PATH


def build_env() -> dict[str, str]:
    return {**tool_env(), "PYENV_VERSION": os.environ.get("PYENV_VERSION", PYENV_VERSIONS)}


@dataclass(frozen=True)
class BuiltFunction:
    function_dir: Path
    layer_dir: Path
    python: str

    def invoke(self, event: dict[str, Any], env: dict[str, str], *, timeout: float = 300.0,
               broken: tuple[str, ...] = (), migrations: Path | None = None) -> subprocess.Popen[str]:
        """Start one invocation (the caller waits, or watches it run)."""
        args = [self.python, str(RUNNER), str(self.function_dir), str(self.layer_dir), str(timeout),
                json.dumps(event), *(f"--break={module}" for module in broken)]
        if migrations is not None:
            args.append(f"--migrations={migrations}")
        lambda_env = {"PATH": os.environ["PATH"], "POWERTOOLS_TRACE_DISABLED": "true",
                      "POWERTOOLS_LOG_LEVEL": "INFO", "AWS_DEFAULT_REGION": "us-east-1", **env}
        return subprocess.Popen(args, env=lambda_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def build(build_dir: Path) -> BuiltFunction:
    """``sam build`` of the template (no container), as a deployer runs it."""
    result = subprocess.run([tool(".venv-sam", "sam", "aws-sam-cli"), "build", "--build-dir", str(build_dir / "build"),
                             "--cache-dir", str(build_dir / "cache")], cwd=REPO, env=build_env(),
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # the interpreter itself, not a pyenv shim (the Lambda environment has no PYENV_VERSION)
    python = subprocess.run(["python3.13", "-c", "import sys; print(sys.executable)"], env=build_env(),
                            capture_output=True, text=True, timeout=60)
    assert python.returncode == 0, f"python3.13 runs the layer built for it: {python.stderr[-500:]}"
    return BuiltFunction(build_dir / "build" / "SchemaMigrationFunction", build_dir / "build" / "OnceOnlyLayer" /
                         "python", python.stdout.strip())


def finished(process: subprocess.Popen[str], limit: float = 120.0) -> dict[str, Any]:
    """The handler's return value; the invocation must end on its own."""
    return finished_at(process, limit)[0]


def finished_at(process: subprocess.Popen[str], limit: float = 120.0) -> tuple[dict[str, Any], float]:
    """The handler's return value and the wall-clock time of its function's timeout."""
    stdout, stderr = process.communicate(timeout=limit)
    assert process.returncode == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1]), json.loads(stderr.splitlines()[0])["timeout_at"]



def source_custom_resource() -> ModuleType:
    """functions/schema_migration/custom_resource.py of the source tree: the
    same module object its app.py imports (the folder is appended to sys.path,
    so it shadows nothing)."""
    if str(SOURCE) not in sys.path:
        sys.path.append(str(SOURCE))
    return importlib.import_module("custom_resource")
