"""The alarms that say dunning is held for a lagging payments feed watch the
metrics the billing functions really publish, under the service dimension
they publish them with (a renamed metric would leave an alarm that never fires)."""

from __future__ import annotations

import pytest

from onceonly_cli.local.template import load_template
from tests.support import REPO_ROOT

ROOT = REPO_ROOT


@pytest.mark.parametrize(("alarm", "metric", "service", "function"), [
    ("PaymentsFeedLagAlarm", "payments_feed_lag_seconds", "payment-watcher", "payment_watcher"),
    ("InvoicesHeldForPaymentsAlarm", "invoices_held_for_payments", "overdue-invoices", "overdue_invoices"),
])
def test_the_held_dunning_alarms_watch_what_the_functions_publish(
        alarm: str, metric: str, service: str, function: str) -> None:
    properties = load_template(ROOT / "template.yaml")["Resources"][alarm]["Properties"]
    handler = (ROOT / "functions" / function / "app.py").read_text()
    assert properties["MetricName"] == metric and f'name="{metric}"' in handler
    assert properties["Dimensions"] == [{"Name": "service", "Value": service}]
    assert f'Metrics(service="{service}")' in handler
    assert properties["ComparisonOperator"] == "GreaterThanThreshold" and properties["AlarmActions"]
