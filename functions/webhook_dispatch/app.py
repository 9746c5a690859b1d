"""WebhookDispatchFunction: SQS -> one delivery per (webhook_id, event_id) and its
first attempt. Each record fails alone (ReportBatchItemFailures): a malformed one
comes back until maxReceiveCount moves it to the dead-letter queue, one without
time left comes back later, and the records a store outage stopped come back
with a growing visibility timeout (webhooks/dispatch_batch.py). The records are
delivered concurrently (WEBHOOK_MAX_IN_FLIGHT) before the batch processor reads
their outcomes in order."""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from onceonly_app.db.schema import schema_required
from onceonly_app.runtime import settings
from onceonly_app.runtime.tracing import handler_tracer
from onceonly_app.webhooks.dispatch_batch import DispatchBatch, check_sqs_event, fail_if_nothing_went_through
from onceonly_app.webhooks.runtime import dispatch_queue, webhook_service
from onceonly_app.webhooks.service import DispatchResult

logger = Logger(service="webhook-dispatch")
tracer = handler_tracer("webhook-dispatch")  # X-Ray only when the template turns tracing on
metrics = Metrics(namespace=settings.metrics_namespace(os.environ),
                  service="webhook-dispatch")
# A batch of only malformed records is answered record by record, not as a
# crashed invocation; fail_if_nothing_went_through raises for the other causes.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)

OUTCOME_METRICS = {
    "succeeded": "deliveries_succeeded",
    "retrying": "deliveries_failed",
    "dead": "deliveries_dead",
    "held": "deliveries_held",  # the subscription is disabled: kept until it is enabled
    "dropped": "deliveries_dropped",  # the subscription was deleted
    "aborted": "deliveries_aborted",  # the receiver answered webhook-delivery: abort-message
}


def count(result: DispatchResult) -> None:
    if result.kind in ("duplicate", "rearmed"):
        metrics.add_metric(name="claims_contended", unit=MetricUnit.Count, value=1)
    elif result.kind == "fenced" or (result.attempt is not None and not result.attempt.recorded):
        metrics.add_metric(name="fenced_writes_refused", unit=MetricUnit.Count, value=1)
    elif result.attempt is not None and result.attempt.outcome == "deferred":
        # Held back by the endpoint's limit: no attempt was made, none failed.
        metrics.add_metric(name="deliveries_deferred", unit=MetricUnit.Count, value=1)
    elif result.attempt is not None:
        metrics.add_metric(name=OUTCOME_METRICS[result.attempt.status], unit=MetricUnit.Count, value=1)
        if result.attempt.auto_disabled:  # alarmed on (template.yaml, WebhookAutoDisabledAlarm)
            metrics.add_metric(name="subscriptions_auto_disabled", unit=MetricUnit.Count, value=1)


@tracer.capture_lambda_handler
@metrics.log_metrics
@logger.inject_lambda_context(log_event=False)  # never log events, whatever POWERTOOLS_LOGGER_LOG_EVENT says
@schema_required(logger)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    check_sqs_event(event)  # MalformedBatchError before any record is touched (docs/security.md)
    service = webhook_service(logger)
    batch = DispatchBatch(service, service.invocation_budget(context), logger)
    batch.run([SQSRecord(record) for record in event["Records"]])

    def record_handler(record: SQSRecord) -> str:
        result = batch.outcome(record)
        count(result)
        return result.kind

    try:
        response = process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context)
        fail_if_nothing_went_through(processor)
        return response
    finally:
        # Also when every record failed (then fail_if_nothing_went_through may raise).
        if batch.stopped_by_outage:
            metrics.add_metric(name="records_stopped_by_outage", unit=MetricUnit.Count,
                               value=len(batch.stopped_by_outage))
            queue = dispatch_queue()
            if queue is not None:
                batch.back_off(*queue)
