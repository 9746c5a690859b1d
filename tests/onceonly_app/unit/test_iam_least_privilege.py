"""IAM least privilege, read from what SAM deploys: template.yaml transformed
by aws-sam-translator (SAM's policy templates and generated roles included) for
each store kind, every condition decided. A wildcard action (``sqs:SendMessage*``)
or a ``"*"`` resource fails the test unless the action has no resource-level
permissions (the allowlist below, each with its reason); an AWS managed policy
must be one this file knows, with the reason it is acceptable, and only where
it is used. No role may grant more than the role SAM generated for its
function before the functions got roles of their own (sam_generated_roles.json)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.deploy.iam import as_list, deployed, function_roles

STORE_KINDS = ["dynamodb", "redis", "postgresql"]
IAM_TYPES = ("AWS::IAM::Role", "AWS::IAM::ManagedPolicy", "AWS::IAM::Policy")

# Actions that IAM only grants on Resource "*": no scoped form exists.
STAR_RESOURCE_ALLOWED = {
    "xray:PutTraceSegments": "X-Ray has no resource-level permissions for sending traces",
    "xray:PutTelemetryRecords": "X-Ray has no resource-level permissions for telemetry",
    "cloudwatch:PutMetricData": "metrics have no ARN; scope with the cloudwatch:namespace condition at most",
    "ec2:CreateNetworkInterface": "Lambda's VPC ENIs; IAM requires * for the describe/create pair",
    "ec2:DescribeNetworkInterfaces": "Describe* calls have no resource-level permissions",
    "ec2:DescribeSubnets": "Describe* calls have no resource-level permissions",
}

# AWS managed policies the roles may name. Their content is not in the
# template, so each is judged here by its published content.
MANAGED_POLICIES = {
    "AWSXrayWriteOnlyAccess": "xray:Put*/GetSampling*: X-Ray has no resource-level permissions",
}
XRAY = "AWSXrayWriteOnlyAccess"
# What SAM attached to every role before, and the template's own policy in its
# place, in a VPC only. Its published actions (v3), all on "*":
SAM_VPC_ACCESS = "service-role/AWSLambdaVPCAccessExecutionRole"
SAM_VPC_ACCESS_ACTIONS = {
    "logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets", "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"}
VPC_ACCESS = {"Ref": "FunctionVpcAccessPolicy"}
IN_A_VPC = {"SubnetIds": "subnet-0a,subnet-0b", "SecurityGroupIds": "sg-0c"}

# The roles before (see its "_about"), for these parameters of each kind.
SAM_GENERATED = json.loads((Path(__file__).parent / "sam_generated_roles.json").read_text())
VARIANTS = {"plain": {}, "vpc": IN_A_VPC, "traced": {"Tracing": "Active"}}


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


def aws_managed(resource: dict[str, Any]) -> list[str]:
    """The AWS managed policies one IAM resource attaches, by name. A {"Ref": ...}
    is one of the template's own policies, checked above."""
    arns = [arn["Fn::Sub"].replace("${AWS::Partition}", "aws") if isinstance(arn, dict) and "Fn::Sub" in arn
            else arn for arn in resource["Properties"].get("ManagedPolicyArns", [])]
    return [arn.split(":iam::aws:policy/", 1)[1] for arn in arns if isinstance(arn, str)]


def managed_policy_names(template: dict[str, Any]) -> set[str]:
    return {name for resource in template["Resources"].values() if resource["Type"] in IAM_TYPES
            for name in aws_managed(resource)}


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_no_wildcard_action_or_resource_where_a_scoped_one_exists(kind: str) -> None:
    template = deployed(kind)
    found = [(name, problem) for name, statement in statements(template) for problem in too_broad(statement)]
    assert found == []
    assert sum(1 for _ in statements(template)) >= 7  # the roles were read: at least one statement each


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_every_aws_managed_policy_is_known_and_justified(kind: str) -> None:
    names = managed_policy_names(deployed(kind, Tracing="Active", **IN_A_VPC))
    assert names == MANAGED_POLICIES.keys()  # the roles were read: each known policy is used somewhere
    assert SAM_VPC_ACCESS not in names  # its logs:* on every log group is what the own policy leaves out


def roles_with(template: dict[str, Any], policy: str | dict[str, str]) -> list[str]:
    """The roles attaching ``policy``: an AWS managed one by name, or {"Ref": ...}."""
    return sorted(name for name, resource in template["Resources"].items() if resource["Type"] == "AWS::IAM::Role"
                  and (policy in aws_managed(resource) if isinstance(policy, str)
                       else policy in resource["Properties"]["ManagedPolicyArns"]))


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_xray_write_access_only_when_tracing_is_on(kind: str) -> None:
    assert roles_with(deployed(kind), XRAY) == []
    traced = deployed(kind, Tracing="Active")
    assert roles_with(traced, XRAY) == sorted(function_roles(traced).values())


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_vpc_access_only_when_the_functions_are_in_a_vpc(kind: str) -> None:
    """SAM would add AWSLambdaVPCAccessExecutionRole to a role it generates for
    any VpcConfig, also the Globals' !If that removes it; the functions' own
    roles get the network-interface calls under HasVpc (SubnetIds given) only."""
    for outside in (deployed(kind), deployed(kind, Tracing="Active")):
        assert "FunctionVpcAccessPolicy" not in outside["Resources"]
        assert roles_with(outside, VPC_ACCESS) == roles_with(outside, SAM_VPC_ACCESS) == []
    in_vpc = deployed(kind, **IN_A_VPC)
    assert roles_with(in_vpc, VPC_ACCESS) == sorted(function_roles(in_vpc).values())
    granted = {action for statement in in_vpc["Resources"]["FunctionVpcAccessPolicy"]["Properties"]
               ["PolicyDocument"]["Statement"] for action in as_list(statement["Action"])}
    assert granted == {a for a in SAM_VPC_ACCESS_ACTIONS if a.startswith("ec2:")}  # what Lambda needs, no logs


def canonical(statement: dict[str, Any]) -> str:
    return json.dumps(statement, sort_keys=True)


def grants(statements: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(action, resource, the rest of the statement) for each action on each resource."""
    return {(action, canonical(resource), canonical({k: v for k, v in s.items() if k not in ("Action", "Resource")}))
            for s in statements for action in as_list(s["Action"]) for resource in as_list(s["Resource"])}


def own_log_group_statement(template: dict[str, Any], function: str) -> dict[str, Any]:
    """What replaces AWSLambdaBasicExecutionRole (logs calls on every log group):
    writing to the function's own LoggingConfig log group, which the stack creates."""
    log_group = template["Resources"][function]["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
    return {"Action": ["logs:CreateLogStream", "logs:PutLogEvents"], "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [log_group, "Arn"]}}


# Calls a function makes now that it did not make when SAM generated its role:
# the schema step reads and grants the store's identity marker and re-queues
# deliveries after a change of store (docs/deploy.md, section 3), reads the
# retry queue's depth and sends the stale alarms' first samples (alarm_clocks.py).
CALLS_SINCE = {"SchemaMigrationFunctionRole": ["dynamodb:GetItem", "dynamodb:UpdateItem"]}
STATEMENTS_SINCE = {"SchemaMigrationFunctionRole": [
    {"Effect": "Allow", "Action": "dynamodb:Query",
     "Resource": {"Fn::Sub": "${CoordinationTable.Arn}/index/due"}},
    {"Effect": "Allow", "Action": "cloudwatch:PutMetricData", "Resource": "*",
     "Condition": {"StringEquals": {"cloudwatch:namespace": "onceonly"}}},
]}


def with_calls_since(role: str, statements: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The role's statements as SAM generated them, its DynamoDB statement
    widened by CALLS_SINCE, and STATEMENTS_SINCE (nothing else)."""
    added = CALLS_SINCE.get(role, [])
    return [{**s, "Action": [*s["Action"], *added]} if added and str(s.get("Action", [""])[0]).startswith("dynamodb:")
            else s for s in statements] + STATEMENTS_SINCE.get(role, [])


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kind", STORE_KINDS)
def test_no_role_grants_more_than_the_role_sam_generated(kind: str, variant: str) -> None:
    template = deployed(kind, **VARIANTS[variant])
    before = SAM_GENERATED[f"{kind}/{variant}"]
    roles = function_roles(template)
    assert sorted(roles.values()) == sorted(before)  # same logical ids: an update changes the roles in place
    for function, name in roles.items():
        role = template["Resources"][name]["Properties"]
        had = before[name]
        assert role["AssumeRolePolicyDocument"]["Statement"] == [  # Lambda alone may assume it
            {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}], name
        assert set(aws_managed(template["Resources"][name])) <= {arn.split(":policy/", 1)[1] for arn in had["managed"]
                                                                 if isinstance(arn, str)}, name
        own = [arn for arn in role["ManagedPolicyArns"] if "Ref" in arn and arn != VPC_ACCESS]
        assert own == [arn for arn in had["managed"] if isinstance(arn, dict)], name
        if VPC_ACCESS in role["ManagedPolicyArns"]:  # in place of SAM's, which every role had
            assert f"arn:aws:iam::aws:policy/{SAM_VPC_ACCESS}" in had["managed"], name
        statements = [s for policy in role["Policies"] for s in policy["PolicyDocument"]["Statement"]]
        logs = own_log_group_statement(template, function)
        assert canonical(logs) in {canonical(s) for s in statements}, name
        # each action on each resource granted was granted before (a role may grant fewer)
        granted = grants([s for s in statements if canonical(s) != canonical(logs)])
        assert granted <= grants(with_calls_since(name, had["statements"])), (name, granted - grants(
            with_calls_since(name, had["statements"])))


def test_the_checks_catch_what_they_are_for() -> None:
    """The checker itself: each too-broad form is caught, the allowed ones pass."""
    assert too_broad({"Effect": "Allow", "Action": "sqs:SendMessage*", "Resource": "arn:aws:sqs:r:1:q"})
    assert too_broad({"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": "*"})
    assert too_broad({"Effect": "Allow", "Action": "*", "Resource": "arn:aws:sqs:r:1:q"})
    assert too_broad({"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"})
    assert not too_broad({"Effect": "Allow", "Action": "xray:PutTraceSegments", "Resource": "*"})
    assert not too_broad({"Effect": "Deny", "Action": "*", "Resource": "*"})


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_each_on_failure_destination_is_writable_by_its_function(kind: str) -> None:
    """SAM grants this itself only to the roles it generates; the functions'
    own roles must grant it, or a failed tick is lost without a trace."""
    template = deployed(kind)
    roles = function_roles(template)
    destinations = {config["Properties"]["FunctionName"]["Ref"]: config["Properties"]["DestinationConfig"]["OnFailure"]
                    for config in template["Resources"].values() if config["Type"] == "AWS::Lambda::EventInvokeConfig"
                    and "OnFailure" in config["Properties"]["DestinationConfig"]}
    assert len(destinations) == 4  # the four ticks
    for function, destination in destinations.items():
        send = {"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": destination["Destination"]}
        granted = [s for policy in template["Resources"][roles[function]]["Properties"]["Policies"]
                   for s in policy["PolicyDocument"]["Statement"]]
        assert send in granted, function
