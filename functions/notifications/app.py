"""NotificationsFunction (rate(5 minutes)): once per tick on any number of
replicas, send the e-mail outbox through SES (onceonly_app.billing.notifications)."""

from __future__ import annotations

from functools import cache
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

import onceonly
from onceonly_app.billing import notifications
from onceonly_app.billing.config import JobSettings, NotificationSettings
from onceonly_app.billing.ses import SesNotifier
from onceonly_app.db.clients import coordination_store, db_pool
from onceonly_app.db.schema import schema_required
from onceonly_app.runtime.aws import bounded_client
from onceonly_app.runtime.budget import Budget
from onceonly_app.runtime.tracing import handler_tracer

SETTINGS = JobSettings.from_env("notifications")  # at cold start, through the one reader
NOTIFY = NotificationSettings.from_env()
logger = Logger(service="notifications")
tracer = handler_tracer("notifications")  # X-Ray only when the template turns tracing on
metrics = Metrics(service="notifications")


@cache
def ses_notifier() -> SesNotifier:
    return SesNotifier(bounded_client("ses"), NOTIFY.sender)


@tracer.capture_lambda_handler
@logger.inject_lambda_context(log_event=False)
@metrics.log_metrics
@schema_required(logger)
@onceonly.scheduled(coordination_store, job=SETTINGS.job, ttl=SETTINGS.tick_ttl,
                    heartbeat=SETTINGS.tick_heartbeat, keep=SETTINGS.tick_keep, logger=logger, metrics=metrics)
def handler(event: dict[str, Any], context: Any, tick: onceonly.Tick) -> dict[str, int]:
    result = notifications.run(
        db_pool(), tick, ses_notifier(), NOTIFY, log=logger, tenant=SETTINGS.tenant,
        budget=Budget.of_lambda(context),
    )
    for name, value in (("notifications_sent", result.sent), ("notifications_retrying", result.retrying),
                        ("notifications_failed", result.failed + result.abandoned),
                        ("notifications_cancelled", result.cancelled),
                        ("rows_transitioned", result.sent + result.failed + result.abandoned)):
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    logger.info("notifications sent", extra={**result.as_dict(), "token": tick.token})
    return result.as_dict()
