"""RecurringBillingFunction (daily): once per tick on any number of replicas,
generate one invoice per due schedule period, catching up missed periods
(onceonly_app.billing.recurring)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

import onceonly
from onceonly_app.billing import recurring
from onceonly_app.billing.config import JobSettings
from onceonly_app.db.clients import coordination_store, db_pool
from onceonly_app.db.schema import schema_required
from onceonly_app.runtime.budget import Budget
from onceonly_app.runtime.tracing import handler_tracer

SETTINGS = JobSettings.from_env("recurring-billing")  # at cold start, through the one reader
logger = Logger(service="recurring-billing")
tracer = handler_tracer("recurring-billing")  # X-Ray only when the template turns tracing on
metrics = Metrics(service="recurring-billing")


@tracer.capture_lambda_handler
@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
@schema_required(logger)
@onceonly.scheduled(coordination_store, job=SETTINGS.job, ttl=SETTINGS.tick_ttl,
                    heartbeat=SETTINGS.tick_heartbeat, keep=SETTINGS.tick_keep, logger=logger, metrics=metrics)
def handler(event: dict[str, Any], context: Any, tick: onceonly.Tick) -> dict[str, int]:
    result = recurring.run(db_pool(), tick, tenant=SETTINGS.tenant, budget=Budget.of_lambda(context))
    metrics.add_metric(name="invoices_generated", unit=MetricUnit.Count, value=result.generated)
    metrics.add_metric(name="rows_transitioned", unit=MetricUnit.Count, value=result.generated)
    logger.info("recurring invoices generated", extra={"generated": result.generated, "token": tick.token})
    return {"generated": result.generated}
