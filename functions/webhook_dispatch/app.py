"""WebhookDispatchFunction: SQS -> one delivery per (webhook_id, event_id) and its
first attempt. A malformed record fails alone (ReportBatchItemFailures); after
maxReceiveCount the queue's redrive policy moves it to the dead-letter queue."""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from onceonly_app.appdb.schema import schema_required
from onceonly_app.webhooks.messages import MalformedMessageError, parse_message
from onceonly_app.webhooks.runtime import webhook_service

logger = Logger(service="webhook-dispatch")
tracer = Tracer(service="webhook-dispatch")  # X-Ray when the template turns tracing on
metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "onceonly"),
                  service="webhook-dispatch")
processor = BatchProcessor(event_type=EventType.SQS)

OUTCOME_METRICS = {
    "succeeded": "deliveries_succeeded",
    "retrying": "deliveries_failed",
    "dead": "deliveries_dead",
}


def record_handler(record: SQSRecord) -> str:
    try:
        request = parse_message(record.body)
        result = webhook_service(logger).dispatch(request)
    except MalformedMessageError as exc:
        # The reason names the bad field; the body itself is never logged.
        logger.warning("malformed record rejected",
                       extra={"message_id": record.message_id, "reason": str(exc)})
        raise
    if result.kind in ("duplicate", "rearmed"):
        metrics.add_metric(name="claims_contended", unit=MetricUnit.Count, value=1)
    elif result.attempt is not None:
        if result.attempt.recorded:
            metrics.add_metric(name=OUTCOME_METRICS[result.attempt.status], unit=MetricUnit.Count, value=1)
        else:
            metrics.add_metric(name="fenced_writes_refused", unit=MetricUnit.Count, value=1)
    return result.kind


@tracer.capture_lambda_handler
@metrics.log_metrics
@logger.inject_lambda_context
@schema_required(logger)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context)
