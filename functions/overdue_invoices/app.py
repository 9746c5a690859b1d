"""OverdueInvoicesFunction (hourly, rate(1 hour)): once per tick on any number of
replicas, move open invoices past due to `overdue` (onceonly_app.billing.overdue)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

import onceonly
from onceonly_app.billing import overdue
from onceonly_app.billing.config import PAYMENT_WATCHER_JOB, JobSettings
from onceonly_app.db.clients import coordination_store, db_pool
from onceonly_app.db.schema import schema_required
from onceonly_app.runtime.budget import Budget
from onceonly_app.runtime.tracing import handler_tracer

SETTINGS = JobSettings.from_env("overdue-invoices")  # at cold start, through the one reader
WATCHER = JobSettings.from_env(PAYMENT_WATCHER_JOB).job  # whose ledger time holds back dunning
logger = Logger(service="overdue-invoices")
tracer = handler_tracer("overdue-invoices")  # X-Ray only when the template turns tracing on
metrics = Metrics(service="overdue-invoices")


@tracer.capture_lambda_handler
@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
@schema_required(logger)
@onceonly.scheduled(coordination_store, job=SETTINGS.job, ttl=SETTINGS.tick_ttl,
                    heartbeat=SETTINGS.tick_heartbeat, keep=SETTINGS.tick_keep, logger=logger, metrics=metrics)
def handler(event: dict[str, Any], context: Any, tick: onceonly.Tick) -> dict[str, int]:
    result = overdue.run(db_pool(), tick, watcher=WATCHER, tenant=SETTINGS.tenant, budget=Budget.of_lambda(context))
    metrics.add_metric(name="rows_transitioned", unit=MetricUnit.Count, value=result.transitioned)
    metrics.add_metric(name="invoices_held_for_payments", unit=MetricUnit.Count, value=result.held)
    logger.info("overdue invoices transitioned", extra={"transitioned": result.transitioned, "held": result.held,
                                                        "batches": result.batches, "token": tick.token})
    return {"transitioned": result.transitioned}
