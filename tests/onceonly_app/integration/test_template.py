"""The SAM template validates (sam validate, with and without --lint) and
builds without a container. The SAM CLI lives in its own venv (scripts/test
installs it to .venv-sam) because it pins boto3, click and requests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support import REPO_ROOT

pytestmark = pytest.mark.sam_build

REPO = REPO_ROOT


def _sam() -> str:
    candidates = [os.environ.get("ONCEONLY_SAM"), str(REPO / ".venv-sam" / "bin" / "sam"), shutil.which("sam")]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return candidate
    pytest.fail("the SAM CLI is missing: run scripts/test (it installs aws-sam-cli into .venv-sam)", pytrace=False)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(AWS_DEFAULT_REGION="us-east-1", AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
               SAM_CLI_TELEMETRY="0")
    # sam build for python3.13 needs that interpreter on PATH; pyenv shims find it this way.
    env.setdefault("PYENV_VERSION", "3.11.7:3.12.1:3.13.0")
    return env


def _run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_sam(), *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600)


class _CfnLoader(yaml.SafeLoader):
    """Reads CloudFormation short-form tags (!Ref, !Sub, …) as plain values."""


_CfnLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def _template() -> dict:
    return yaml.load((REPO / "template.yaml").read_text(), Loader=_CfnLoader)  # noqa: S506


def test_a_valid_webhook_event_outlasts_a_day_of_store_outage_before_the_dead_letter_queue() -> None:
    """maxReceiveCount and the dispatcher's outage backoff together: receive n of
    a record an outage stopped is followed by outage_visibility(n) of waiting, and
    the failure of the last receive moves it. That must take more than 24 h,
    while a malformed record (no backoff) still reaches the DLQ within hours."""
    from onceonly_app.webhooks.dispatch_batch import outage_visibility

    resources = _template()["Resources"]
    queue = resources["WebhookQueue"]["Properties"]
    max_receives = queue["RedrivePolicy"]["maxReceiveCount"]
    assert sum(outage_visibility(n) for n in range(1, max_receives)) > 24 * 3600
    assert max_receives * queue["VisibilityTimeout"] <= 2 * 3600
    dispatcher = resources["WebhookDispatchFunction"]["Properties"]
    assert "WEBHOOK_QUEUE_URL" in dispatcher["Environment"]["Variables"]  # where the backoff is set


@pytest.mark.parametrize("lint", [False, True], ids=["validate", "validate-lint"])
def test_sam_validate(lint: bool) -> None:
    result = _run("validate", *(["--lint"] if lint else []))
    assert result.returncode == 0, result.stdout + result.stderr


def test_sam_build(tmp_path: Path) -> None:
    result = _run("build", "--build-dir", str(tmp_path / "build"), "--cache-dir", str(tmp_path / "cache"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    layer = tmp_path / "build" / "OnceOnlyLayer" / "python"
    assert (layer / "onceonly" / "__init__.py").exists()
    assert (layer / "onceonly" / "stores" / "postgres" / "sql" / "store.sql").exists()
    assert (layer / "onceonly" / "stores" / "redis" / "lua" / "claim.lua").exists()
    assert (layer / "onceonly" / "stores" / "dynamodb" / "queue.py").exists()
    assert (layer / "psycopg").is_dir() and (layer / "redis").is_dir()
    assert "BEGIN CERTIFICATE" in (layer / "onceonly_app" / "db" / "certs" / "rds-global-bundle.pem").read_text()
    # the local tooling never ships in the layer, nor do the tests' pause hooks
    assert not (layer / "onceonly_cli").exists() and not (layer / "rich").exists()
    ours = [*layer.joinpath("onceonly").rglob("*.py"), *layer.joinpath("onceonly_app").rglob("*.py")]
    assert ours and not [p for p in ours if "signal.SIGSTOP" in p.read_text(encoding="utf-8")]
    # Reproducible: the layer holds exactly the lock's distributions, at its versions,
    # boto3 with the botocore aws-xray-sdk brings (never the runtime's boto3 on the layer's botocore).
    bundled = {_dist_name(p.name): p.name[:-len(".dist-info")].rpartition("-")[2] for p in layer.glob("*.dist-info")}
    ours = {"onceonly", "onceonly-app"}  # installed from this repository, not from the lock
    assert ours <= set(bundled), bundled
    assert {name: v for name, v in bundled.items() if name not in ours} == _locked(), bundled
    assert bundled["boto3"] and bundled["botocore"]
    assert not (layer / "bin").exists()  # console scripts have no use in a layer
    _every_module_is_compiled_for_the_runtime(layer)


def _every_module_is_compiled_for_the_runtime(layer: Path) -> None:
    """/opt is read-only on Lambda: a module without its .pyc is compiled on
    every cold start. Each one has a .pyc for the runtime's Python (this venv
    is python3.13, like the template's runtime), hash-based and unchecked:
    the zip keeps file times to 2 s only, which a timestamp check could take
    for a change."""
    import importlib.util
    import sys

    assert sys.version_info[:2] == (3, 13)
    tag = sys.implementation.cache_tag  # cpython-313
    sources = list(layer.rglob("*.py"))
    missing = [p for p in sources if not (p.parent / "__pycache__" / f"{p.stem}.{tag}.pyc").exists()]
    assert len(sources) > 900 and missing == [], missing[:10]
    for source in sources[::50]:
        header = (source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc").read_bytes()[:8]
        assert header[:4] == importlib.util.MAGIC_NUMBER, source
        assert int.from_bytes(header[4:8], "little") == 0b01, source  # hash-based, source not checked


def _dist_name(name: str) -> str:
    return name[:-len(".dist-info")].rpartition("-")[0].lower().replace("_", "-")


def _locked() -> dict[str, str]:
    """name -> version of every distribution in layer/requirements.txt, each with hashes."""
    text = (REPO / "layer" / "requirements.txt").read_text().replace("\\\n", " ")
    pins = [line.split() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert pins and all(len(pin) > 1 and pin[1].startswith("--hash=sha256:") for pin in pins), "not a hashed lock"
    return {pin[0].split("==")[0].lower(): pin[0].split("==")[1] for pin in pins}


def test_the_lock_satisfies_the_ranges_the_distributions_declare() -> None:
    """The ranges are stated once, in the library's and the app's
    pyproject.toml; the layer's lock must stay inside them."""
    import tomllib

    from packaging.requirements import Requirement

    library = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    app = tomllib.loads((REPO / "app" / "pyproject.toml").read_text())["project"]["dependencies"]
    declared = [Requirement(r) for r in [*library["postgres"], *library["redis"], *library["dynamodb"], *app]]
    locked = _locked()
    for requirement in declared:
        if requirement.name == "onceonly":
            continue
        assert requirement.name.lower() in locked, f"{requirement.name} is not in the lock"
        assert requirement.specifier.contains(locked[requirement.name.lower()]), (requirement, locked[requirement.name])


def test_layer_is_python313_and_every_function_uses_it() -> None:
    template = _template()
    layer = template["Resources"]["OnceOnlyLayer"]
    assert layer["Properties"]["ContentUri"] == "layer/"
    assert layer["Properties"]["CompatibleRuntimes"] == ["python3.13"]
    assert layer["Metadata"]["BuildMethod"] == "makefile"  # layer/Makefile: pip for python3.13, byte-compiled
    assert "--python-version 3.13" in (REPO / "layer" / "Makefile").read_text()
    assert template["Globals"]["Function"]["Runtime"] == "python3.13"
    functions = [r for r in template["Resources"].values() if r["Type"] == "AWS::Serverless::Function"]
    for function in functions:
        code = REPO / function["Properties"]["CodeUri"]
        module = function["Properties"]["Handler"].rsplit(".", 1)[0]
        assert (code / f"{module}.py").exists(), f"{code} has no {module}.py"


LAMBDA_FIRST_RETRY_SECONDS = 60  # Lambda retries a failed asynchronous invocation about a minute later


def test_a_dead_scheduled_runs_tick_is_free_before_lambdas_retry() -> None:
    """A crashed run stops renewing its tick, so the lease must run out well
    before Lambda's retry of that invocation arrives; the heartbeat (default a
    third of the lease) keeps a live run's tick however long the run takes."""
    resources = _template()["Resources"].values()
    scheduled = [r["Properties"] for r in resources if r["Type"] == "AWS::Serverless::Function"
                 and "TICK_LEASE_SECONDS" in r["Properties"].get("Environment", {}).get("Variables", {})]
    assert len(scheduled) == 4  # the billing jobs under the cron guard
    for function in scheduled:
        env = function["Environment"]["Variables"]
        lease = float(env["TICK_LEASE_SECONDS"])
        heartbeat = float(env.get("TICK_HEARTBEAT_SECONDS", lease / 3))
        assert lease <= LAMBDA_FIRST_RETRY_SECONDS / 2, (function["CodeUri"], lease)
        assert heartbeat < lease / 2, (function["CodeUri"], heartbeat)
