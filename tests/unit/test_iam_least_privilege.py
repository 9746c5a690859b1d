"""IAM least privilege, read from what SAM deploys: template.yaml transformed
by aws-sam-translator (SAM's policy templates and generated roles included) for
each store kind, every condition decided. A wildcard action (``sqs:SendMessage*``)
or a ``"*"`` resource fails the test unless the action has no resource-level
permissions (the allowlist below, each with its reason); an AWS managed policy
must be one this file knows, with the reason it is acceptable."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.cfn_conditions import Conditions
from tests.support.stack import parameters_for, transformed

STORE_KINDS = ["dynamodb", "redis", "postgresql"]
IAM_TYPES = ("AWS::IAM::Role", "AWS::IAM::ManagedPolicy", "AWS::IAM::Policy")

# Actions that IAM only grants on Resource "*": no scoped form exists.
STAR_RESOURCE_ALLOWED = {
    "xray:PutTraceSegments": "X-Ray has no resource-level permissions for sending traces",
    "xray:PutTelemetryRecords": "X-Ray has no resource-level permissions for telemetry",
    "cloudwatch:PutMetricData": "metrics have no ARN; scope with the cloudwatch:namespace condition at most",
    "ec2:CreateNetworkInterface": "Lambda's VPC ENIs; IAM requires * for the describe/create pair",
    "ec2:DescribeNetworkInterfaces": "Describe* calls have no resource-level permissions",
}

# AWS managed policies SAM attaches to the roles it generates. They are not in
# the template, so each is judged here by its published content.
MANAGED_POLICIES = {
    "service-role/AWSLambdaBasicExecutionRole":
        "logs:CreateLogGroup/CreateLogStream/PutLogEvents on *: SAM attaches it to every role it generates; "
        "each function writes only to its own LoggingConfig log group",
    "AWSXrayWriteOnlyAccess": "xray:Put*/GetSampling*: X-Ray has no resource-level permissions",
    "service-role/AWSLambdaVPCAccessExecutionRole":
        "ec2 network-interface calls for VPC functions: IAM requires * for them",
}


def deployed(kind: str, **extra: str) -> dict[str, Any]:
    parameters = parameters_for(kind, **extra)
    template = transformed(parameters)
    return Conditions(template, parameters).deployed(template)


def statements(template: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(resource name, statement) for every IAM policy statement the template deploys."""
    for name, resource in template["Resources"].items():
        if resource["Type"] not in IAM_TYPES:
            continue
        props = resource["Properties"]
        documents = [props["PolicyDocument"]] if "PolicyDocument" in props else \
            [policy["PolicyDocument"] for policy in props.get("Policies", [])]
        for document in documents:
            for statement in document["Statement"]:
                yield name, statement


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def too_broad(statement: dict[str, Any]) -> list[str]:
    """What in one statement is wider than a scoped form that exists."""
    if statement.get("Effect") != "Allow":
        return []
    if "NotAction" in statement or "NotResource" in statement:
        return ["NotAction/NotResource grants everything else"]
    actions = [str(a) for a in as_list(statement.get("Action"))]
    problems = [f"wildcard action {a}" for a in actions if "*" in a]
    if "*" in as_list(statement.get("Resource")):
        problems += [f"{a} on Resource *" for a in actions if a not in STAR_RESOURCE_ALLOWED]
    return problems


def managed_policy_names(template: dict[str, Any]) -> set[str]:
    names = set()
    for resource in template["Resources"].values():
        for arn in resource["Properties"].get("ManagedPolicyArns", []) if resource["Type"] in IAM_TYPES else []:
            if isinstance(arn, str):  # a {"Ref": ...} is one of the template's own policies, checked above
                names.add(arn.split(":policy/", 1)[1])
    return names


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_no_wildcard_action_or_resource_where_a_scoped_one_exists(kind: str) -> None:
    template = deployed(kind)
    found = [(name, problem) for name, statement in statements(template) for problem in too_broad(statement)]
    assert found == []
    assert sum(1 for _ in statements(template)) >= 7  # the roles were read: at least one statement each


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_every_aws_managed_policy_is_known_and_justified(kind: str) -> None:
    names = managed_policy_names(deployed(kind))
    assert "service-role/AWSLambdaBasicExecutionRole" in names  # the roles were read
    assert names - MANAGED_POLICIES.keys() == set()


def roles_with(template: dict[str, Any], policy: str) -> list[str]:
    return [name for name, resource in template["Resources"].items() if resource["Type"] == "AWS::IAM::Role"
            and f"arn:aws:iam::aws:policy/{policy}" in resource["Properties"].get("ManagedPolicyArns", [])]


def test_xray_write_access_only_when_tracing_is_on() -> None:
    """SAM adds AWSXrayWriteOnlyAccess for any Tracing but a literal Disabled;
    the template's !Ref Tracing is resolved by SAM, so Disabled adds nothing."""
    assert roles_with(deployed("dynamodb"), "AWSXrayWriteOnlyAccess") == []
    traced = deployed("dynamodb", Tracing="Active")
    roles = [name for name, r in traced["Resources"].items() if r["Type"] == "AWS::IAM::Role"]
    assert len(roles) == 7 and roles_with(traced, "AWSXrayWriteOnlyAccess") == roles


def test_the_checks_catch_what_they_are_for() -> None:
    """The checker itself: each too-broad form is caught, the allowed ones pass."""
    assert too_broad({"Effect": "Allow", "Action": "sqs:SendMessage*", "Resource": "arn:aws:sqs:r:1:q"})
    assert too_broad({"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": "*"})
    assert too_broad({"Effect": "Allow", "Action": "*", "Resource": "arn:aws:sqs:r:1:q"})
    assert too_broad({"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"})
    assert not too_broad({"Effect": "Allow", "Action": "xray:PutTraceSegments", "Resource": "*"})
    assert not too_broad({"Effect": "Deny", "Action": "*", "Resource": "*"})
