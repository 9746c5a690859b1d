"""PaymentWatcherFunction (rate(1 minute)): once per tick, and with one active
poller at a time, apply new payments from the payments API and enqueue
`invoice.paid` webhook events (onceonly_app.billing.payment_watcher)."""

from __future__ import annotations

from functools import cache
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

import onceonly
from onceonly_app.billing import payment_watcher
from onceonly_app.billing.config import PAYMENT_WATCHER_JOB, JobSettings, PaymentWatcherSettings
from onceonly_app.billing.payments_api import PaymentsClient
from onceonly_app.db.clients import coordination_store, db_pool
from onceonly_app.db.schema import schema_required
from onceonly_app.runtime.aws import bounded_client
from onceonly_app.runtime.budget import Budget
from onceonly_app.runtime.tracing import handler_tracer

SETTINGS = JobSettings.from_env(PAYMENT_WATCHER_JOB)  # at cold start, through the one reader
WATCH = PaymentWatcherSettings.from_env()
logger = Logger(service="payment-watcher")
tracer = handler_tracer("payment-watcher")  # X-Ray only when the template turns tracing on
metrics = Metrics(service="payment-watcher")


@cache
def poll() -> payment_watcher.Poll:
    return payment_watcher.Poll(PaymentsClient(WATCH.api_url), WATCH.accepted_assets, WATCH.poller_ttl,
                                WATCH.page_limit, WATCH.max_pages)


@cache
def sqs_client() -> Any:
    return bounded_client("sqs")


@tracer.capture_lambda_handler
@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
@schema_required(logger)
@onceonly.scheduled(coordination_store, job=SETTINGS.job, ttl=SETTINGS.tick_ttl,
                    heartbeat=SETTINGS.tick_heartbeat, keep=SETTINGS.tick_keep, logger=logger, metrics=metrics)
def handler(event: dict[str, Any], context: Any, tick: onceonly.Tick) -> dict[str, Any]:
    result = payment_watcher.run(db_pool(), tick, poll(), sqs_client(), WATCH.queue_url, tenant=SETTINGS.tenant,
                                 budget=Budget.of_lambda(context), log=logger)
    for name, value in (("payments_applied", result.payments_applied),
                        ("rows_transitioned", result.invoices_paid),
                        ("payments_unmatched", result.unmatched), ("payments_partial", result.partial),
                        ("payments_overpaid", result.overpaid), ("payments_late", result.late),
                        ("webhook_events_sent", result.webhooks.get("sent", 0))):
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    if result.feed_lag_seconds is not None:  # how far the payments source's ingestion is behind (alarmed)
        metrics.add_metric(name="payments_feed_lag_seconds", unit=MetricUnit.Seconds, value=result.feed_lag_seconds)
    logger.info("payments polled", extra={**result.as_dict(), "token": tick.token})
    return result.as_dict()
