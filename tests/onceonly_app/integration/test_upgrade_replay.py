"""Upgrading a stack made from an earlier version of template.yaml with plain
`sam deploy` (docs/deploy.md, section 9). Every earlier version in the git
history is the old stack, with the values an operator of that version could
have given it (its defaults, and the examples the issue named: the old
DispatchReservedConcurrency -1 or a number, a From address at example.com,
VpcEndpoints=create without route tables). samcli's own parameter merging and
changeset call (tests/support/deploy/sam_merge.py) say what CloudFormation gets:
UsePreviousValue for every parameter without an override. Then every
constraint and every rule of the new template is checked against the values
CloudFormation resolves from that, as it does before it changes anything."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.deploy.cfn_conditions import Conditions
from tests.support.deploy.cfn_parameters import parameter_errors
from tests.support.deploy.stack import REPO, parameters_for, tool, tool_env, transformed

ASSETS = "USD=USDC:GA5ZSEJYB37JRC5AVCIA5MOP4RHTM335X2KGX3IHOJAPP5RE34K4KZVN"
# What an operator of an earlier version gave its stack: the first value that version accepts.
OPERATOR = {
    "DatabaseUrlSecretArn": ["arn:aws:secretsmanager:us-east-1:123456789012:secret:onceonly-db-AbCdEf"],
    "SesIdentityArn": ["arn:aws:ses:us-east-1:123456789012:identity/example.com"],
    "SesFromAddress": ["billing@example.com", "billing@onceonly.dev"],
    "PaymentsApiUrl": ["https://horizon.stellar.org"],
    "PaymentsAcceptedAssets": [ASSETS],
}
SCENARIOS = {
    "defaults": {},
    "redis": {"StoreKind": "redis",
              "StoreUrlSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:onceonly-redis-AbCdEf"},
    "endpoints-without-route-tables": {"SubnetIds": "subnet-0a,subnet-0b", "SecurityGroupIds": "sg-0c",
                                       "VpcEndpoints": "create", "VpcId": "vpc-0d"},
    "reserved-number": {"DispatchMaximumConcurrency": "5", "DispatchReservedConcurrency": "20"},
    "reserved-off": {"DispatchReservedConcurrency": "-1"},
}
# The overrides docs/deploy.md section 9 tells an upgrade to add: parameters an
# earlier version did not have, that have no default.
UPGRADE_OVERRIDES = {"PaymentsAcceptedAssets": ASSETS, "PaymentsApiUrl": "https://horizon.stellar.org"}


def earlier_templates(directory: Path) -> dict[str, Path]:
    """Every earlier version of template.yaml in the history, by commit."""
    log = subprocess.run(["git", "log", "--format=%H", "--", "template.yaml"], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert log.returncode == 0 and log.stdout.split(), f"the test needs the git history: {log.stderr}"
    current = (REPO / "template.yaml").read_text()
    found = {}
    for commit in log.stdout.split():
        text = subprocess.run(["git", "show", f"{commit}:template.yaml"], cwd=REPO, capture_output=True, text=True,
                              timeout=60, check=True).stdout
        if text != current and text not in {p.read_text() for p in found.values()}:
            path = directory / f"{commit[:10]}.yaml"
            path.write_text(text)
            found[commit[:10]] = path
    return found


def old_stack_values(old: dict[str, Any], scenario: dict[str, str]) -> dict[str, str]:
    """The scenario's values that the old template accepts, as its stack has them."""
    declared = old["Parameters"]
    values = {k: str(spec["Default"]) for k, spec in declared.items() if "Default" in spec}
    candidates = {**OPERATOR, **{k: [v] for k, v in scenario.items()}}
    for key, options in candidates.items():
        accepted = [v for v in options if key in declared and not parameter_errors({key: declared[key]}, {key: v})]
        if accepted:
            values[key] = accepted[0]
    return values


def resolved(upgrade: list[dict[str, Any]], previous: dict[str, str]) -> dict[str, str]:
    """What CloudFormation takes for each parameter of the changeset (the
    template's Default for those the changeset leaves out)."""
    values = {}
    for parameter in upgrade:
        key = parameter["ParameterKey"]
        values[key] = previous[key] if parameter.get("UsePreviousValue") else parameter["ParameterValue"]
    return values


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    directory = tmp_path_factory.mktemp("templates")
    olds = earlier_templates(directory)
    assert len(olds) >= 5, olds
    python = tool(".venv-sam", "python", "aws-sam-cli")
    parse = subprocess.run([python, str(REPO / "tests/support/deploy/sam_merge.py"), str(REPO / "template.yaml"),
                            json.dumps([[str(path), {}] for path in olds.values()])],
                           capture_output=True, text=True, env=tool_env(), timeout=300)
    assert parse.returncode == 0, parse.stderr[-3000:]
    parsed = dict(zip(olds, json.loads(parse.stdout)["upgrades"], strict=True))
    cases, runs = [], []
    for commit, path in olds.items():
        old = parsed[commit]["old"]
        for scenario, values in SCENARIOS.items():
            previous = old_stack_values(old, values)
            assert parameter_errors(old["Parameters"], previous) == {}, (commit, scenario)  # a valid old stack
            if Conditions(old, previous).broken_rules(old):
                continue  # this version refused the scenario itself
            overrides = {k: v for k, v in UPGRADE_OVERRIDES.items() if k not in old["Parameters"]}
            cases.append({"commit": commit, "scenario": scenario, "previous": previous, "overrides": overrides})
            runs.append([str(path), overrides])
    merge = subprocess.run([python, str(REPO / "tests/support/deploy/sam_merge.py"), str(REPO / "template.yaml"),
                            json.dumps(runs)], capture_output=True, text=True, env=tool_env(), timeout=300)
    assert merge.returncode == 0, merge.stderr[-3000:]
    out = json.loads(merge.stdout)
    for case, upgrade in zip(cases, out["upgrades"], strict=True):
        case["changeset"] = upgrade["parameters"]
        case["new"] = out["new"]
    return cases


def test_every_earlier_stack_upgrades_with_plain_sam_deploy(replay: list[dict[str, Any]]) -> None:
    refused = {}
    for case in replay:
        new = case["new"]
        values = resolved(case["changeset"], case["previous"])
        errors = parameter_errors(new["Parameters"], values)
        broken = Conditions(new, values).broken_rules(new)
        if errors or broken:
            refused[f"{case['commit']}/{case['scenario']}"] = (errors, broken)
    assert refused == {}
    # The replay covered what the issue named, on versions that accepted it.
    covered = {(c["scenario"], c["previous"].get(k)) for c in replay for k in ("DispatchReservedConcurrency",
                                                                                 "SesFromAddress", "VpcEndpoints")}
    assert {("reserved-off", "-1"), ("reserved-number", "20"), ("defaults", "billing@example.com"),
            ("endpoints-without-route-tables", "create")} <= covered
    assert any(c["overrides"] for c in replay) and any(not c["overrides"] for c in replay)


def test_every_upgrade_override_is_in_the_docs() -> None:
    text = (REPO / "docs" / "deploy.md").read_text()
    upgrades = text[text.index("## 9. Upgrades"):]
    for key in UPGRADE_OVERRIDES:
        assert re.search(rf"--parameter-overrides[^\n]*{key}=", upgrades), key


@pytest.mark.parametrize(("value", "reserved"), [("none", False), ("-1", False), ("match", True), ("20", True)])
def test_an_earlier_reserved_concurrency_is_mapped(value: str, reserved: bool) -> None:
    """-1 meant no reservation; a number meant a reservation, now exactly the
    SQS cap (a smaller one throttles the pollers, docs/deploy.md section 9)."""
    parameters = parameters_for("dynamodb", DispatchReservedConcurrency=value)
    deployed = Conditions(transformed(parameters), parameters).deployed(transformed(parameters))
    function = deployed["Resources"]["WebhookDispatchFunction"]["Properties"]
    if reserved:
        assert function["ReservedConcurrentExecutions"] == {"Ref": "DispatchMaximumConcurrency"}
    else:
        assert "ReservedConcurrentExecutions" not in function
