"""`onceonly invoke` on a small function in a temporary template: the response on
stdout, logs on stderr, the template's environment and timeout, and one-line
errors for everything a user can get wrong."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

import onceonly
from tests.support.cli.cli_support import ONCEONLY, one_line_error, run_cli

HANDLER = '''
import os, time

def handler(event, context):
    print("a log line, not the response")
    if event.get("sleep"):
        time.sleep(event["sleep"])
    if event.get("boom"):
        raise ValueError("boom requested")
    return {
        "echo": event,
        "remaining_ms": context.get_remaining_time_in_millis(),
        "function_name": context.function_name,
        "env": {k: os.environ.get(k) for k in ("GREETING", "FROM_FILE", "DATABASE_URL", "ONCEONLY_STORE_URL",
                                               "AWS_LAMBDA_FUNCTION_NAME", "UNRESOLVED")},
    }
'''

TEMPLATE = """
Globals:
  Function:
    Timeout: 9
    Environment:
      Variables:
        GREETING: hello
        UNRESOLVED: !Ref SomeParameter
Resources:
  EchoFunction:
    Type: AWS::Serverless::Function
    Properties: {CodeUri: echo/, Handler: app.handler}
  SlowFunction:
    Type: AWS::Serverless::Function
    Properties: {CodeUri: echo/, Handler: app.handler, Timeout: 1}
  MissingCodeFunction:
    Type: AWS::Serverless::Function
    Properties: {CodeUri: absent/, Handler: app.handler}
"""


@pytest.fixture(scope="module")
def ready_database(postgres_url: str) -> str:
    """The session's database with the coordination store set up, as `--no-setup`
    expects (it only checks the store answers); not left to earlier tests."""
    store = onceonly.connect(postgres_url)
    try:
        store.setup()
    finally:
        store.close()
    return postgres_url


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "echo").mkdir()
    (tmp_path / "echo" / "app.py").write_text(HANDLER)
    (tmp_path / "template.yaml").write_text(TEMPLATE)
    (tmp_path / "event.json").write_text(json.dumps({"hello": "world"}))
    return tmp_path


def test_invoke_prints_the_response_with_template_env_and_deadline(project: Path, ready_database: str) -> None:
    env_vars = project / "env.json"
    env_vars.write_text(json.dumps({"Parameters": {"FROM_FILE": "p"}, "EchoFunction": {"GREETING": "hi"}}))
    result = run_cli("invoke", "EchoFunction", "--event", "event.json", "--env-vars", str(env_vars),
                     "--database", ready_database, "--no-setup", cwd=project)
    assert result.returncode == 0, result.stderr
    response = json.loads(result.stdout)
    assert response["echo"] == {"hello": "world"}
    assert 0 < response["remaining_ms"] <= 9000
    assert response["function_name"] == "EchoFunction"
    assert response["env"] == {
        "GREETING": "hi", "FROM_FILE": "p", "DATABASE_URL": ready_database, "ONCEONLY_STORE_URL": ready_database,
        "AWS_LAMBDA_FUNCTION_NAME": "EchoFunction", "UNRESOLVED": None,
    }
    assert "a log line, not the response" in result.stderr
    assert "UNRESOLVED" in result.stderr  # the user is told what only CloudFormation could set


def test_a_raising_handler_prints_the_lambda_error_and_fails(project: Path, ready_database: str) -> None:
    (project / "boom.json").write_text('{"boom": true}')
    result = run_cli("invoke", "EchoFunction", "-e", "boom.json", "--database", ready_database, "--no-setup",
                     cwd=project)
    assert result.returncode == 1
    assert json.loads(result.stdout)["errorType"] == "ValueError"
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line == "onceonly invoke: error: EchoFunction failed: ValueError: boom requested"


def test_the_template_timeout_kills_the_invocation(project: Path, ready_database: str) -> None:
    (project / "slow.json").write_text('{"sleep": 30}')
    result = run_cli("invoke", "SlowFunction", "-e", "slow.json", "--database", ready_database, "--no-setup",
                     cwd=project, timeout=60)
    assert result.returncode == 1
    assert "Task timed out after 1.00 seconds" in result.stdout


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_signal_to_invoke_ends_its_invocation_too(project: Path, ready_database: str, signum: int) -> None:
    (project / "slow.json").write_text('{"sleep": 8}')  # the template gives it 9 s
    proc = subprocess.Popen([str(ONCEONLY), "invoke", "EchoFunction", "-e", "slow.json", "--database",
                             ready_database, "--no-setup"], cwd=project, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (children := psutil.Process(proc.pid).children(recursive=True)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert children, "the invocation never started"
        time.sleep(1)  # the handler is sleeping now
        proc.send_signal(signum)
        code = proc.wait(timeout=30)
        _, alive = psutil.wait_procs(children, timeout=3)  # well before the handler's 8 s are up
        for child in alive:  # never leave one running, even when the assertion below fails
            child.kill()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not alive, [c.cmdline() for c in alive]
    assert code == (-signal.SIGKILL if signum == signal.SIGKILL else 128 + signum)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["invoke", "NoSuchFunction", "-e", "event.json"], "no function 'NoSuchFunction'"),
        (["invoke", "EchoFunction", "-e", "absent.json"], "event file absent.json not found"),
        (["invoke", "EchoFunction", "-e", "broken.json"], "event file broken.json is not valid JSON"),
        (["invoke", "EchoFunction", "-e", "event.json", "--env-vars", "absent-env.json"],
         "env-vars file absent-env.json not found"),
        (["invoke", "EchoFunction"], "the following arguments are required: --event"),
        (["invoke", "EchoFunction", "-e", "event.json", "-t", "absent.yaml"], "absent.yaml not found"),
        (["invoke", "MissingCodeFunction", "-e", "event.json"], "CodeUri folder"),
        (["invoke", "EchoFunction", "-e", "event.json", "--store", "redis://127.0.0.1:1/0"],
         "store redis://127.0.0.1:1/0 is unreachable"),
        (["invoke", "EchoFunction", "-e", "event.json", "--store", "mongodb://x"], "bad store URL"),
        (["invoke", "EchoFunction", "-e", "event.json", "--database", "postgresql://nobody@127.0.0.1:1/x"],
         "database postgresql://nobody@127.0.0.1:1/x is unreachable"),
        (["simulate", "--replicas", "0"], "must be at least 1"),
        (["simulate", "--crash-rate", "2"], "must be between 0 and 1"),
        (["simulate", "--events", "many"], "expected a whole number"),
        (["redrive"], "one of the arguments --delivery --all is required"),
        (["nonsense"], "invalid choice"),
    ],
)
def test_bad_arguments_give_one_line_and_a_non_zero_exit(
    project: Path, postgres_url: str, args: list[str], expected: str
) -> None:
    (project / "broken.json").write_text("{not json")
    if "--database" not in args and args[0] == "invoke":
        args = [*args, "--database", postgres_url]
    line = one_line_error(run_cli(*args, cwd=project, timeout=60))
    assert expected in line
