"""The CloudWatch dashboard in template.yaml shows the metrics the functions
really publish: every metric it names is emitted by the code (a renamed metric
would leave an empty graph), and every metric operators need is on it."""

from __future__ import annotations

import json
import re
from typing import Any

from onceonly_cli.local.template import Intrinsic, load_template
from tests.support import REPO_ROOT

ROOT = REPO_ROOT
TEMPLATE = ROOT / "template.yaml"
# What an operator looks at: claims, contended claims, reclaimed
# leases, fenced writes refused, ticks run/skipped/failed, queue depth, dead letters.
REQUIRED = {
    "deliveries_succeeded", "deliveries_failed", "deliveries_dead", "claims_contended", "leases_reclaimed",
    "fenced_writes_refused", "ticks_run", "ticks_skipped_duplicate", "ticks_failed", "ticks_superseded",
    "retry_queue_depth",
}


def _dashboard() -> tuple[dict[str, Any], dict[str, Any]]:
    template = load_template(TEMPLATE)
    resource = template["Resources"]["OperationsDashboard"]
    body = resource["Properties"]["DashboardBody"]
    assert isinstance(body, Intrinsic) and body.name == "Sub" and isinstance(body.value, str)
    references = set(re.findall(r"\$\{([^}]+)\}", body.value))
    for reference in references - {"AWS::Region"}:
        assert reference.split(".")[0] in template["Resources"], f"${{{reference}}} names no resource"
    return template, json.loads(re.sub(r"\$\{([^}]+)\}", r"\1", body.value))


def _metric_names(dashboard: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for widget in dashboard["widgets"]:
        for metric in widget.get("properties", {}).get("metrics", []):
            if isinstance(metric[0], dict):
                names |= set(re.findall(r'MetricName="(\w+)"', metric[0]["expression"]))
                assert "{onceonly,service}" in metric[0]["expression"]
            elif metric[0] == "onceonly":
                names.add(metric[1])
    return names


def _published_source() -> str:
    files = [*ROOT.glob("functions/*/app.py"), ROOT / "src" / "onceonly" / "scheduled.py"]
    return "\n".join(path.read_text(encoding="utf-8") for path in files)


def test_the_dashboard_names_only_metrics_the_functions_publish() -> None:
    template, dashboard = _dashboard()
    assert template["Globals"]["Function"]["Environment"]["Variables"]["POWERTOOLS_METRICS_NAMESPACE"] == "onceonly"
    source = _published_source()
    names = _metric_names(dashboard)
    assert names, "no onceonly metric on the dashboard"
    unpublished = sorted(name for name in names if f'"{name}"' not in source)
    assert unpublished == [], f"on the dashboard but published by no function: {unpublished}"


def test_every_metric_operators_need_is_on_the_dashboard() -> None:
    _, dashboard = _dashboard()
    assert _metric_names(dashboard) >= REQUIRED, REQUIRED - _metric_names(dashboard)
    queues = {m[3] for w in dashboard["widgets"] for m in w.get("properties", {}).get("metrics", [])
              if isinstance(m[0], str) and m[0] == "AWS/SQS"}
    assert len(queues) == 2  # the webhook queue's backlog and its dead-letter queue


def test_explicit_service_dimensions_are_the_functions_service_names() -> None:
    _, dashboard = _dashboard()
    services = {m[3] for w in dashboard["widgets"] for m in w.get("properties", {}).get("metrics", [])
                if isinstance(m[0], str) and m[0] == "onceonly"}
    source = _published_source()
    assert services and all(f'service="{service}"' in source for service in services), services


def test_the_dashboard_shows_each_subscriptions_attempts_and_last_error_per_service() -> None:
    _template, dashboard = _dashboard()
    (widget,) = [w for w in dashboard["widgets"] if w["type"] == "log"]
    query = widget["properties"]["query"]
    # Both functions that attempt deliveries, their "attempt recorded" lines (service.py), grouped.
    assert "SOURCE 'WebhookDispatchLogGroup'" in query and "SOURCE 'WebhookRetryLogGroup'" in query
    assert "filter message = 'attempt recorded'" in query
    assert "by webhook_id, service, outcome" in query and "latest(error)" in query
    service_source = (ROOT / "app" / "src" / "onceonly_app" / "webhooks" / "service.py").read_text(encoding="utf-8")
    assert '"attempt recorded"' in service_source and '"webhook_id": webhook_id' in service_source
