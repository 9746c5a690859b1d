"""The five stale alarms of the deployed template, evaluated the way
CloudWatch does (tests/support/deploy/cloudwatch_alarms.py) over a timeline of the
samples the stack publishes: the schema step's first sample at the deploy
(onceonly_app/db/alarm_clocks.py) and one per run of each schedule. A new,
healthy stack is never in ALARM, whenever it is deployed; a stall is in
ALARM within the window its description states (plus one period: CloudWatch
evaluates complete periods). Without the deploy's sample, the new stack
starts in ALARM: what the first sample is for. Then the schema step's own
call, on a stand-in CloudWatch client."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from onceonly_app.db import alarm_clocks
from tests.support.deploy.cfn_conditions import Conditions
from tests.support.deploy.cloudwatch_alarms import Alarm
from tests.support.deploy.stack import parameters_for, transformed

HOUR = 3600
# alarm -> (the function whose schedule feeds it, its metric's service, the window its description states)
STALE = {
    "PaymentWatcherStaleAlarm": ("PaymentWatcherFunction", "payment-watcher", None),
    "WebhookRetryStaleAlarm": ("WebhookRetryFunction", "webhook-retry", "10 minutes"),
    "NotificationsStaleAlarm": ("NotificationsFunction", "notifications", "15 minutes"),
    "OverdueInvoicesStaleAlarm": ("OverdueInvoicesFunction", "overdue-invoices", "2 hours"),
    "RecurringBillingStaleAlarm": ("RecurringBillingFunction", "recurring-billing", "25 hours"),
}
RUN_SECONDS = 20  # a run publishes its sample this long after its scheduled time
DEPLOYS = [datetime(2026, 12, 2, 0, 31, tzinfo=UTC).timestamp(),  # just after the daily run
           datetime(2026, 12, 2, 13, 7, 41, tzinfo=UTC).timestamp()]


@pytest.fixture(scope="module")
def stack() -> tuple[dict[str, Any], dict[str, Any]]:
    parameters = parameters_for("dynamodb")
    template = transformed(parameters)
    conditions = Conditions(template, parameters)
    return conditions.deployed(template), conditions.parameters


def schedule_times(expression: str, start: float, end: float) -> list[float]:
    """When an EventBridge schedule fires between start and end."""
    rate = re.fullmatch(r"rate\((\d+) (minute|minutes|hour|hours)\)", expression)
    if rate:
        step = int(rate[1]) * (60 if rate[2].startswith("minute") else HOUR)
        first = (int(start // step) + 1) * step
        return [float(t) for t in range(first, int(end), step)]
    cron = re.fullmatch(r"cron\((\d+) (\d+) \* \* \? \*\)", expression)
    assert cron, expression
    offset = int(cron[2]) * HOUR + int(cron[1]) * 60
    day = int(start // 86400) * 86400
    return [float(t) for t in range(day + offset, int(end), 86400) if t > start]


def alarm_and_schedule(stack: tuple[dict[str, Any], dict[str, Any]], name: str) -> tuple[Alarm, str, dict[str, Any]]:
    template, parameters = stack
    properties = template["Resources"][name]["Properties"]
    function = STALE[name][0]
    rules = [r for r in template["Resources"].values() if r["Type"] == "AWS::Events::Rule"
             and r["Properties"]["Targets"][0]["Arn"]["Fn::GetAtt"][0] == function]
    return Alarm.of(properties, parameters), rules[0]["Properties"]["ScheduleExpression"], properties


def runs(expression: str, start: float, end: float) -> list[tuple[float, float]]:
    return [(t + RUN_SECONDS, 1.0) for t in schedule_times(expression, start, end)]


def first_samples(service: str, deployed_at: float) -> list[tuple[float, float]]:
    """The samples the schema step sends for ``service`` (as the stand-in client records them)."""
    client = RecordingCloudWatch()
    alarm_clocks.start_clocks(client, "onceonly", [service], 0, now=deployed_at)
    (call,) = client.calls
    return [(d["Timestamp"].timestamp(), 0.0) for d in call["MetricData"] if d["Dimensions"][0]["Value"] == service]


class RecordingCloudWatch:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def put_metric_data(self, **kwargs: Any) -> None:
        self.calls.append(kwargs)


@pytest.mark.parametrize("deployed_at", DEPLOYS)
@pytest.mark.parametrize("name", STALE)
def test_a_new_healthy_stack_is_never_in_alarm(stack: Any, name: str, deployed_at: float) -> None:
    alarm, schedule, properties = alarm_and_schedule(stack, name)
    assert properties["Dimensions"] == [{"Name": "service", "Value": STALE[name][1]}]
    assert properties["TreatMissingData"] == "breaching"  # a stall must not look like "no data, fine"
    assert alarm.period in alarm_clocks.PERIODS
    end = deployed_at + 2 * 86400
    first = first_samples(STALE[name][1], deployed_at)
    scheduled = runs(schedule, deployed_at, end)
    states = {alarm.state([*first, *scheduled], t) for t in range(int(deployed_at) + 1, int(end), 60)}
    assert states == {"OK"}, name
    # Without the deploy's samples, the same stack starts in ALARM.
    first_minutes = [alarm.state(scheduled, t) for t in range(int(deployed_at) + 1, int(deployed_at) + 600, 60)]
    assert "ALARM" in first_minutes, name


@pytest.mark.parametrize("name", STALE)
def test_a_stall_is_in_alarm_within_the_stated_window(stack: Any, name: str) -> None:
    alarm, schedule, properties = alarm_and_schedule(stack, name)
    deployed_at = DEPLOYS[1]
    stalled_at = deployed_at + 3 * 86400  # the schedule stops (a disabled rule, every run failing)
    samples = [*first_samples(STALE[name][1], deployed_at), *runs(schedule, deployed_at, stalled_at)]
    last_run = samples[-1][0]
    evaluations = range(int(last_run) + 1, int(last_run) + 3 * alarm.window, 60)
    first_alarm = next(t for t in evaluations if alarm.state(samples, t) == "ALARM")
    assert first_alarm - last_run <= alarm.window + alarm.period + 60, name
    stated = STALE[name][2]
    if stated is not None:  # the description promises this window
        assert stated in properties["AlarmDescription"]
        amount, unit = stated.split()
        assert alarm.window == int(amount) * (HOUR if unit.startswith("hour") else 60), name
    else:
        assert "PaymentWatcherStaleMinutes" in properties["AlarmDescription"]
        assert alarm.window == 60 * int(stack[1]["PaymentWatcherStaleMinutes"])


def test_the_schema_step_sends_each_alarm_its_first_sample(stack: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    template, _ = stack
    variables = template["Resources"]["SchemaMigrationFunction"]["Properties"]["Environment"]["Variables"]
    monkeypatch.setenv(alarm_clocks.SERVICES_VARIABLE, variables[alarm_clocks.SERVICES_VARIABLE])
    client = RecordingCloudWatch()
    assert alarm_clocks.start_clocks(client, "onceonly", alarm_clocks.services(), 3, now=DEPLOYS[0]) == 15
    (call,) = client.calls
    sent = {(d["MetricName"], d["Dimensions"][0]["Value"]): d["Value"] for d in call["MetricData"]}
    expected = {(template["Resources"][name]["Properties"]["MetricName"], service): 0.0
                for name, (_, service, _) in STALE.items()}
    expected[("retry_queue_depth", "webhook-retry")] = 3
    assert call["Namespace"] == "onceonly" and sent == expected
    for name in STALE:  # each alarm exists only once that sample was sent
        assert template["Resources"][name]["DependsOn"] == "SchemaMigration"
