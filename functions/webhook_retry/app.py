"""WebhookRetryFunction: every minute, claim due deliveries from the due queue in
batches and re-attempt them until nothing is due or the deadline nears. Any
number of concurrent invocations is safe: each claim is exclusive and fenced."""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from onceonly.scheduled import scheduled_time_of
from onceonly_app.db.schema import schema_required
from onceonly_app.runtime import settings
from onceonly_app.runtime.tracing import handler_tracer
from onceonly_app.webhooks.runtime import webhook_service

logger = Logger(service="webhook-retry")
tracer = handler_tracer("webhook-retry")  # X-Ray only when the template turns tracing on
metrics = Metrics(namespace=settings.metrics_namespace(os.environ),
                  service="webhook-retry")

COUNTERS = ("succeeded", "failed", "dead", "held", "dropped", "aborted", "deferred", "claims_contended",
            "leases_reclaimed", "fenced_writes_refused", "claims_failed", "auto_disabled")
METRIC_NAMES = {"succeeded": "deliveries_succeeded", "failed": "deliveries_failed", "dead": "deliveries_dead",
                "held": "deliveries_held", "dropped": "deliveries_dropped", "deferred": "deliveries_deferred",
                "aborted": "deliveries_aborted", "auto_disabled": "subscriptions_auto_disabled"}


@tracer.capture_lambda_handler
@metrics.log_metrics
@logger.inject_lambda_context(log_event=False)  # never log events, whatever POWERTOOLS_LOGGER_LOG_EVENT says
@schema_required(logger)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    scheduled_time_of(event)  # InvalidEventError for anything but the schedule's event (docs/security.md)
    service = webhook_service(logger)
    report = service.run_retries(service.invocation_budget(context))
    summary: dict[str, Any] = {name: getattr(report, name) for name in COUNTERS}
    summary.update(claimed=report.claimed, finished_elsewhere=report.finished_elsewhere,
                   handed_back=report.handed_back)
    for name in COUNTERS:
        metrics.add_metric(name=METRIC_NAMES.get(name, name), unit=MetricUnit.Count, value=summary[name])
    if report.queue_depth is not None:
        summary["retry_queue_depth"] = report.queue_depth.total
        metrics.add_metric(name="retry_queue_depth", unit=MetricUnit.Count, value=report.queue_depth.total)
        metrics.add_metric(name="retry_queue_due", unit=MetricUnit.Count, value=report.queue_depth.due)
    logger.info("retry run finished", extra=summary)
    return summary
