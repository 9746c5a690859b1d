"""Offline deploy checks: the template transformed by
aws-sam-translator for each StoreKind and created as a stack on moto's server
on 127.0.0.1 until CREATE_COMPLETE, with the schema custom resource answered by
the real handler code against the real stores; cfn-lint clean; checkov clean
apart from reviewed inline skips; the deploy parameters checked on the
transformed template.

moto's gaps, worked around here and not in the template:
- moto rejects ``Fn::If`` inside IAM policies: the test resolves the Ifs of
  IAM roles and managed policies with the stack's parameters first;
- moto passes a custom resource's properties unresolved (a LayerVersion
  object it cannot serialise): the test turns them into strings;
- moto cannot run a Lambda (no Docker): the test plays CloudFormation's request
  to the schema function itself, with moto's own ResponseURL, so moto learns
  the result the way CloudFormation would;
- moto skips AWS::CloudWatch::Alarm and AWS::Lambda::EventInvokeConfig
  (it warns and creates nothing): those are asserted on the transformed
  template instead (test_alarms_* and test_failed_ticks_*);
- moto's stacks attach no role's ManagedPolicyArns, and its Lambda answers 500
  for the schema function once the stack invoked it: the stack test checks each
  function's role and its inline policies, tests/onceonly_app/unit/test_iam_least_privilege.py
  the managed policies.
"""

from __future__ import annotations

import copy
import json
import subprocess
import time
import uuid
from typing import Any

import boto3
import psycopg
import pytest
import requests

import onceonly
from onceonly_app.schema_step import apply_schema
from tests.support.deploy.built_schema_function import source_custom_resource
from tests.support.deploy.cfn_conditions import Conditions
from tests.support.deploy.stack import REPO, STACK_REGION, parameters_for, tool, tool_env, transformed, upload_code

KINDS = ["dynamodb", "redis", "postgresql"]
SCHEDULED_JOBS = ["OverdueInvoicesFunction", "NotificationsFunction", "RecurringBillingFunction",
                  "PaymentWatcherFunction"]


def _for_moto(template: dict[str, Any], parameters: dict[str, str]) -> dict[str, Any]:
    template = copy.deepcopy(template)
    conditions = Conditions(template, parameters)
    for resource in template["Resources"].values():
        if resource["Type"] in ("AWS::IAM::Role", "AWS::IAM::ManagedPolicy"):
            resource["Properties"] = conditions.resolve_ifs(resource["Properties"])
        if resource["Type"].startswith("Custom::"):
            props = resource["Properties"]
            resource["Properties"] = {key: value if key == "ServiceToken" or isinstance(value, str)
                                      else json.dumps(value) for key, value in props.items()}
    return template


def _wait_for(cfn: Any, stack_id: str, done: set[str], limit: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + limit
    while True:
        stack = cfn.describe_stacks(StackName=stack_id)["Stacks"][0]
        if stack["StackStatus"] in done or time.monotonic() > deadline:
            return stack
        time.sleep(0.2)


@pytest.fixture(scope="module")
def moto_stack_endpoint(moto_endpoint: str) -> str:
    # moto would try to run the custom resource's function in Docker; without
    # Docker it only needs to accept the invoke.
    requests.post(f"{moto_endpoint}/moto-api/config", json={"lambda": {"use_docker": False}}, timeout=10)
    return moto_endpoint


@pytest.mark.parametrize("kind", KINDS)
def test_the_stack_reaches_create_complete_with_the_schema_applied_first(
    kind: str, moto_stack_endpoint: str, postgres_server_url: str, request: pytest.FixtureRequest
) -> None:
    from tests.support.servers.scratch import scratch_database

    parameters = parameters_for(kind)
    template = _for_moto(transformed(parameters), parameters)
    session = boto3.Session(region_name=STACK_REGION)
    upload_code(session.client("s3", endpoint_url=moto_stack_endpoint), template)
    cfn = session.client("cloudformation", endpoint_url=moto_stack_endpoint)
    stack_id = cfn.create_stack(
        StackName=f"onceonly-{kind}-{uuid.uuid4().hex[:8]}", TemplateBody=json.dumps(template),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"],
    )["StackId"]
    # Every function waits for the schema: nothing else can complete first.
    assert _wait_for(cfn, stack_id, set(), limit=0)["StackStatus"] == "CREATE_IN_PROGRESS"

    store_fixture = {"dynamodb": "dynamodb_url", "redis": "redis_url", "postgresql": "postgres_url"}[kind]
    with scratch_database(postgres_server_url, "onceonly_stack") as database_url:
        store_url = request.getfixturevalue(store_fixture) if kind != "postgresql" else database_url
        event = {
            "RequestType": "Create", "StackId": stack_id, "RequestId": str(uuid.uuid4()),
            "LogicalResourceId": "SchemaMigration", "ResourceType": "Custom::OnceOnlySchema",
            "ResponseURL": f"{moto_stack_endpoint}/cloudformation_{STACK_REGION}/cfnresponse?stack={stack_id}",
            "ResourceProperties": template["Resources"]["SchemaMigration"]["Properties"],
        }

        def apply(responder: Any) -> dict[str, str]:
            report = apply_schema(database_url, store_url, responder)
            return {"MigrationsApplied": ",".join(report.migrations_applied)}

        answer = source_custom_resource().handle(event, lambda: 300.0, lambda: (apply, _QuietLog()))
        assert answer["Status"] == "SUCCESS", answer
        stack = _wait_for(cfn, stack_id, {"CREATE_COMPLETE", "CREATE_FAILED", "ROLLBACK_COMPLETE"})
        assert stack["StackStatus"] == "CREATE_COMPLETE", stack.get("StackStatusReason")

        with psycopg.connect(database_url) as conn:
            applied = [row[0] for row in conn.execute("SELECT name FROM schema_migrations ORDER BY name")]
        assert applied == answer["Data"]["MigrationsApplied"].split(",") and applied
        store = onceonly.connect(store_url)
        try:
            assert store.inspect("schema-check") is None  # tables/index exist: no StoreNotReadyError
        finally:
            store.close()

    lambdas = session.client("lambda", endpoint_url=moto_stack_endpoint)
    names = {r.get("LogicalResourceId"): r.get("PhysicalResourceId")
             for r in cfn.describe_stack_resources(StackName=stack_id)["StackResources"]}
    env = lambdas.get_function(FunctionName=names["WebhookDispatchFunction"])["Configuration"]["Environment"]
    variables = env["Variables"]
    # Each function runs under its own role, created with its inline policies
    # (moto's stacks attach no ManagedPolicyArns: tests/onceonly_app/unit/test_iam_least_privilege.py checks those).
    iam = session.client("iam", endpoint_url=moto_stack_endpoint)
    for function in [name for name, r in template["Resources"].items() if r["Type"] == "AWS::Lambda::Function"]:
        role = f"{function}Role"
        if function != "SchemaMigrationFunction":  # moto answers 500 for a function its stack has invoked
            assert lambdas.get_function_configuration(FunctionName=names[function])["Role"] == \
                iam.get_role(RoleName=names[role])["Role"]["Arn"], function
        inline = {policy["PolicyName"] for policy in template["Resources"][role]["Properties"]["Policies"]}
        assert "logs" in inline and set(iam.list_role_policies(RoleName=names[role])["PolicyNames"]) == inline
    cfn.delete_stack(StackName=stack_id)
    if kind == "dynamodb":
        assert variables["ONCEONLY_STORE_URL"].startswith("dynamodb://")
        assert "ONCEONLY_STORE_URL_SECRET" not in variables
    else:
        assert variables["ONCEONLY_STORE_URL_SECRET"] == parameters["StoreUrlSecretArn"]
        assert "ONCEONLY_STORE_URL" not in variables


class _QuietLog:
    def info(self, *args: Any, **kwargs: Any) -> None: ...
    def error(self, *args: Any, **kwargs: Any) -> None: ...


# --- what the parameters deploy (on the transformed template) ---------------

def _deployed(**params: str) -> dict[str, Any]:
    """The transformed template with every Fn::If decided by these parameters."""
    parameters = parameters_for(params.pop("StoreKind", "dynamodb"), **params)
    template = transformed(parameters)
    return Conditions(template, parameters).deployed(template)


def _of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in template["Resources"].items() if r["Type"] == kind}


def test_no_vpc_by_default_and_every_function_in_the_vpc_when_subnets_are_given() -> None:
    assert all("VpcConfig" not in f["Properties"] for f in _of_type(_deployed(), "AWS::Lambda::Function").values())
    in_vpc = _deployed(SubnetIds="subnet-0a,subnet-0b", SecurityGroupIds="sg-0c")
    functions = _of_type(in_vpc, "AWS::Lambda::Function")
    assert len(functions) == 7
    for name, function in functions.items():
        assert function["Properties"]["VpcConfig"] == {"SubnetIds": {"Ref": "SubnetIds"},
                                                       "SecurityGroupIds": {"Ref": "SecurityGroupIds"}}, name
    assert not _of_type(in_vpc, "AWS::EC2::VPCEndpoint")


def test_vpc_endpoints_are_optional_and_let_the_functions_in() -> None:
    network = {"SubnetIds": "subnet-0a", "SecurityGroupIds": "sg-0c", "VpcEndpoints": "create", "VpcId": "vpc-0d",
               "RouteTableIds": "rtb-0e"}
    deployed = _deployed(**network)
    endpoints = _of_type(deployed, "AWS::EC2::VPCEndpoint")
    services = sorted(e["Properties"]["ServiceName"]["Fn::Sub"].rsplit(".", 1)[1] for e in endpoints.values())
    assert services == ["dynamodb", "s3", "secretsmanager", "sqs"]
    # The schema step's answer (S3), its secrets and setup() need them: CloudFormation creates them first.
    assert sorted(r["Ref"] for r in deployed["Resources"]["SchemaMigration"]["Properties"]["NetworkPath"]) == \
        ["DynamoDBEndpoint", "S3Endpoint", "SecretsManagerEndpoint"]
    redis = _deployed(**network, StoreKind="redis")
    assert len(_of_type(redis, "AWS::EC2::VPCEndpoint")) == 3  # no DynamoDB gateway without the table
    assert len(redis["Resources"]["SchemaMigration"]["Properties"]["NetworkPath"]) == 2
    assert _deployed()["Resources"]["SchemaMigration"]["Properties"]["NetworkPath"] == ""


def _variable(conditions: Conditions, variables: dict[str, Any], name: str) -> Any:
    value = variables.get(name, "")  # an AWS::NoValue variable is absent: the handler reads it as ""
    return conditions.value(value) if isinstance(value, dict) and "Ref" in value and \
        value["Ref"] in conditions.parameters else value


@pytest.mark.parametrize("params", [
    {}, {"StoreKind": "redis"}, {"DatabaseHost": "db.internal", "DatabaseName": "billing",
                                 "DatabaseProxyEndpoint": "proxy.internal:5432"}])
def test_the_schema_steps_properties_are_its_functions_configuration(params: dict[str, str]) -> None:
    """The handler treats an Update whose properties differ from its own
    variables as a rollback: on the deployed template they must be equal, or
    no upgrade would ever migrate. Each target and the layer is a property, so
    changing one runs the step again."""
    custom_resource = source_custom_resource()
    parameters = parameters_for(params.get("StoreKind", "dynamodb"), **params)
    template = transformed(parameters)
    conditions = Conditions(template, parameters)
    deployed = conditions.deployed(template)
    props = deployed["Resources"]["SchemaMigration"]["Properties"]
    variables = deployed["Resources"]["SchemaMigrationFunction"]["Properties"]["Environment"]["Variables"]
    for prop, variable in custom_resource.CONFIGURATION.items():
        assert _variable(conditions, props, prop) == _variable(conditions, variables, variable), (prop, variable)
    assert variables[custom_resource.DEPLOYED_MARKER] == props["LayerVersion"]
    assert {"StoreKind", "SchemaRunId"} <= props.keys()


def test_the_dispatch_function_is_capped_by_its_parameters() -> None:
    default = _deployed()
    mapping = next(iter(_of_type(default, "AWS::Lambda::EventSourceMapping").values()))
    assert mapping["Properties"]["ScalingConfig"] == {"MaximumConcurrency": {"Ref": "DispatchMaximumConcurrency"}}
    assert default["Parameters"]["DispatchMaximumConcurrency"]["Default"] == 5
    assert "ReservedConcurrentExecutions" not in default["Resources"]["WebhookDispatchFunction"]["Properties"]
    reserved = _deployed(DispatchReservedConcurrency="match")["Resources"]["WebhookDispatchFunction"]["Properties"]
    assert reserved["ReservedConcurrentExecutions"] == {"Ref": "DispatchMaximumConcurrency"}
    # No number to get wrong: 0 throttles everything, less than the SQS cap throttles its pollers. An
    # earlier version's number is accepted and read as none (-1) or match
    # (tests/onceonly_app/integration/test_upgrade_replay.py).
    import re

    pattern = default["Parameters"]["DispatchReservedConcurrency"]["AllowedPattern"]
    assert [v for v in ("none", "match", "-1", "0", "20", "-2", "all", "") if re.fullmatch(pattern, v)] == \
        ["none", "match", "-1", "0", "20"]
    assert default["Parameters"]["DispatchMaximumConcurrency"]["MinValue"] >= 2


def _watched(alarm: dict[str, Any]) -> list[tuple[str, str]]:
    """(metric, its first dimension's value) of an alarm on one metric, or of
    each metric a metric-math alarm reads."""
    stats = [alarm] if "MetricName" in alarm else \
        [m["MetricStat"]["Metric"] for m in alarm.get("Metrics", []) if "MetricStat" in m]
    return [(stat["MetricName"], value.get("Ref") if isinstance(value := stat["Dimensions"][0]["Value"], dict)
             else value) for stat in stats]


def test_alarms_notify_the_topic_and_cover_every_function() -> None:
    deployed = _deployed(AlarmEmail="ops@example.com")
    alarms = _of_type(deployed, "AWS::CloudWatch::Alarm")
    for name, alarm in alarms.items():
        assert alarm["Properties"]["AlarmActions"] == [{"Ref": "AlarmTopic"}], name
    watched = {watch for a in alarms.values() for watch in _watched(a["Properties"])}
    functions = [n for n in _of_type(deployed, "AWS::Lambda::Function") if n != "SchemaMigrationFunction"]
    for function in functions:
        assert ("Errors", function) in watched and ("Throttles", function) in watched, function
    for service in ("overdue-invoices", "notifications", "recurring-billing", "payment-watcher"):
        assert ("ticks_failed", service) in watched
    # "No tick ran" for every scheduled job: a disabled rule or failing invocations page someone.
    stale = {a["Properties"]["Dimensions"][0]["Value"]: a["Properties"] for a in alarms.values()
             if a["Properties"]["ComparisonOperator"] == "LessThanThreshold" and "MetricName" in a["Properties"]}
    assert sorted(stale) == ["notifications", "overdue-invoices", "payment-watcher", "recurring-billing",
                             "webhook-retry"]
    for service, alarm in stale.items():
        assert alarm["TreatMissingData"] == "breaching" and alarm["Threshold"] == 1, service
        assert alarm["MetricName"] == ("retry_queue_depth" if service == "webhook-retry" else "ticks_run")
    window = {service: a["Period"] * a["EvaluationPeriods"] for service, a in stale.items()
              if not isinstance(a["EvaluationPeriods"], dict)}
    for service, interval in SCHEDULE_SECONDS.items():
        assert interval < window[service] <= interval + 3600, service  # longer than one interval, not much
    assert ("notifications_failed", "notifications") in watched
    metrics = {metric for metric, _ in watched}
    assert {"ApproximateAgeOfOldestMessage", "ApproximateNumberOfMessagesVisible"} <= metrics
    subscription = next(iter(_of_type(deployed, "AWS::SNS::Subscription").values()))["Properties"]
    assert subscription == {"TopicArn": {"Ref": "AlarmTopic"}, "Protocol": "email", "Endpoint": {"Ref": "AlarmEmail"}}
    assert not _of_type(_deployed(), "AWS::SNS::Subscription")


SCHEDULE_SECONDS = {"webhook-retry": 60, "notifications": 300, "overdue-invoices": 3600,
                    "recurring-billing": 86400}


def test_the_schedules_the_stale_alarms_assume() -> None:
    rules = {r["Properties"]["Targets"][0]["Arn"]["Fn::GetAtt"][0]: r["Properties"]["ScheduleExpression"]
             for r in _of_type(_deployed(), "AWS::Events::Rule").values()}
    assert rules["WebhookRetryFunction"] == "rate(1 minute)"
    assert rules["NotificationsFunction"] == "rate(5 minutes)"
    assert rules["OverdueInvoicesFunction"] == "rate(1 hour)"  # hourly: tenants' due days end at any hour
    assert rules["RecurringBillingFunction"].startswith("cron(") and " * * ? *)" in rules["RecurringBillingFunction"]


def test_outputs_name_every_function_log_group_and_the_table() -> None:
    deployed = _deployed()
    outputs = {name: o["Value"].get("Ref") for name, o in deployed["Outputs"].items() if isinstance(o["Value"], dict)}
    for kind in ("AWS::Lambda::Function", "AWS::Logs::LogGroup"):
        for name in _of_type(deployed, kind):
            assert name in outputs.values(), f"no output names {name}"
    assert outputs["CoordinationTableName"] == "CoordinationTable"
    assert deployed["Outputs"]["CoordinationTableName"]["Condition"] == "UseDynamoDB"  # no table, no output


def test_the_ses_sender_has_no_placeholder_default_and_takes_what_earlier_versions_took() -> None:
    spec = _deployed()["Parameters"]["SesFromAddress"]
    assert "Default" not in spec  # a new stack names its sender
    # earlier versions took any text (an upgrade keeps it: tests/onceonly_app/integration/test_upgrade_replay.py)
    assert not {"AllowedPattern", "AllowedValues", "MinLength"} & set(spec)


def test_failed_ticks_go_to_the_tick_failure_queue_and_it_alarms() -> None:
    deployed = _deployed()
    configs = {c["Properties"]["FunctionName"]["Ref"]: c["Properties"]
               for c in _of_type(deployed, "AWS::Lambda::EventInvokeConfig").values()}
    assert sorted(configs) == sorted([*SCHEDULED_JOBS, "SchemaMigrationFunction"])
    # CloudFormation invokes the schema step asynchronously: no retry may rerun it after its answer.
    assert configs.pop("SchemaMigrationFunction")["MaximumRetryAttempts"] == 0
    for config in configs.values():
        assert config["MaximumRetryAttempts"] == 2
        assert config["DestinationConfig"]["OnFailure"]["Destination"] == {"Fn::GetAtt": ["TickFailureQueue", "Arn"]}
    exhausted = deployed["Resources"]["TicksExhaustedAlarm"]["Properties"]
    assert exhausted["Dimensions"][0]["Value"] == {"Fn::GetAtt": ["TickFailureQueue", "QueueName"]}


def test_every_function_waits_for_the_schema_and_logs_with_retention() -> None:
    deployed = _deployed()
    functions = _of_type(deployed, "AWS::Lambda::Function")
    for name, function in functions.items():
        if name != "SchemaMigrationFunction":
            assert function.get("DependsOn") == "SchemaMigration", name
        group = function["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
        assert deployed["Resources"][group]["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    for name in ("CoordinationTable", "WebhookQueue", "WebhookDeadLetterQueue", "TickFailureQueue"):
        # kept when the stack is deleted, not when its first deploy rolls back (nothing in them yet)
        assert deployed["Resources"][name]["DeletionPolicy"] == "RetainExceptOnCreate", name
        assert deployed["Resources"][name]["UpdateReplacePolicy"] == "Retain", name
    retained = [name for name, r in deployed["Resources"].items() if r.get("DeletionPolicy") == "Retain"]
    assert retained == []  # nothing else is left behind by a failed first deploy


def test_the_schema_step_waits_for_its_no_retry_setting() -> None:
    """CloudFormation may create independent resources in parallel: without the
    dependency, the first request could reach the function before its
    MaximumRetryAttempts: 0 is in place, and Lambda would retry a step the
    stack has moved on from."""
    resources = _deployed()["Resources"]
    (config,) = [name for name, r in resources.items() if r["Type"] == "AWS::Lambda::EventInvokeConfig"
                 and r["Properties"]["FunctionName"] == {"Ref": "SchemaMigrationFunction"}]
    assert resources[config]["Properties"]["MaximumRetryAttempts"] == 0
    assert config in _as_list(resources["SchemaMigration"].get("DependsOn"))


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [] if value is None else [value]


def test_kms_key_and_tracing_parameters() -> None:
    plain = _deployed()["Resources"]["FunctionCommonPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert [s["Action"] for s in plain] == ["secretsmanager:GetSecretValue"]
    key = "arn:aws:kms:us-east-1:123456789012:key/abcd"
    with_key = _deployed(KmsKeyArn=key)["Resources"]["FunctionCommonPolicy"]["Properties"]["PolicyDocument"]
    assert with_key["Statement"][1]["Action"] == "kms:Decrypt"
    traced = _deployed(Tracing="Active")["Resources"]["WebhookRetryFunction"]["Properties"]
    assert traced["TracingConfig"] == {"Mode": {"Ref": "Tracing"}}  # the parameter, allowed values Active|Disabled
    untraced = _deployed()["Resources"]["WebhookRetryFunction"]["Properties"]
    assert "TracingConfig" not in untraced
    assert untraced["Environment"]["Variables"]["POWERTOOLS_TRACE_DISABLED"] == "true"
    assert traced["Environment"]["Variables"]["POWERTOOLS_TRACE_DISABLED"] == "false"


@pytest.mark.parametrize(("params", "broken"), [
    ({"StoreKind": "redis"}, "StoreUrlSecretArn is required"),
    ({"StoreKind": "postgresql"}, "StoreUrlSecretArn is required"),
    ({"SubnetIds": "subnet-0a"}, "together"),
    ({"VpcEndpoints": "create"}, "needs VpcId"),
    ({"VpcEndpoints": "create", "VpcId": "vpc-0d"}, "needs SubnetIds"),
])
def test_rules_refuse_incomplete_parameters(params: dict[str, str], broken: str) -> None:
    parameters = {**parameters_for("dynamodb"), **params}
    template = transformed(parameters_for("dynamodb"))
    assert any(broken in message for message in Conditions(template, parameters).broken_rules(template))
    for kind in KINDS:
        complete = parameters_for(kind)
        assert Conditions(template, complete).broken_rules(template) == []
    # Earlier versions made the endpoints without route tables: still accepted (no gateway endpoints then).
    without_route_tables = {**parameters_for("dynamodb"), "VpcEndpoints": "create", "VpcId": "vpc-0d",
                            "SubnetIds": "subnet-0a", "SecurityGroupIds": "sg-0c"}
    assert Conditions(template, without_route_tables).broken_rules(template) == []
    assert not Conditions(template, without_route_tables)["CreateGatewayEndpoints"]


# --- linters -------------------------------------------------------------

def test_cfn_lint_is_clean() -> None:
    # Every rule cfn-lint has, the informational ones included (W1030/W1031 among them).
    result = subprocess.run([tool(".venv-sam", "cfn-lint", "aws-sam-cli (cfn-lint)"), "--include-checks", "I",
                             "--", str(REPO / "template.yaml")], capture_output=True, text=True, env=tool_env(),
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_checkov_finds_nothing_new() -> None:
    """The reviewed baseline is the template's inline skips, each with its reason."""
    result = subprocess.run(
        [tool(".venv-checkov", "checkov", "checkov"), "--file", str(REPO / "template.yaml"),
         "--framework", "cloudformation", "--skip-download", "--output", "json"],
        capture_output=True, text=True, env={**tool_env(), "BC_SKIP_MAPPING": "TRUE"}, timeout=300,
    )
    report = json.loads(result.stdout)
    assert report["summary"]["parsing_errors"] == 0 and report["summary"]["passed"] > 0, report["summary"]
    failed = [(c["check_id"], c["resource"]) for c in report["results"]["failed_checks"]]
    assert failed == [], failed
    skipped = report["results"]["skipped_checks"]
    assert skipped and all(c["check_result"].get("suppress_comment", "").strip() for c in skipped)
