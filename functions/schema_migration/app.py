"""SchemaMigrationFunction: the CloudFormation custom resource behind every
deploy. Applies the coordination store's setup() and the domain migrations
before any other function runs (they depend on it), and answers CloudFormation
SUCCESS or FAILED (custom_resource.py, next to this file).

Only the standard library loads at import time: the layer (psycopg,
Powertools) loads inside the handler, so a build that cannot load is a FAILED
answer with the reason, never a request nobody answers."""

from __future__ import annotations

from typing import Any

import custom_resource


def _load() -> tuple[custom_resource.Step, Any]:
    from aws_lambda_powertools import Logger

    from onceonly_app.db.settings import database_url, store_url
    from onceonly_app.db.store_switch import stack_of
    from onceonly_app.schema_step import apply_schema

    logger = Logger(service="schema-migration")

    def apply(responder: custom_resource.Responder) -> dict[str, str]:
        report = apply_schema(database_url(), store_url(), responder, stack=stack_of(responder.stack_id))
        if report.store_switch.repaired:
            logger.warning(report.store_switch.summary(), extra=report.store_switch.as_data())
        start_alarm_clocks(report.retry_queue_depth, logger)
        return {"MigrationsApplied": ",".join(report.migrations_applied) or "none", "StoreKind": report.store_kind,
                "SchemaVersion": report.schema_version, **report.store_switch.as_data()}

    return apply, logger


def start_alarm_clocks(retry_queue_depth: int, logger: Any) -> None:
    """The stale alarms' first samples (onceonly_app/db/alarm_clocks.py).
    Failing to send them costs at most an alarm that starts in ALARM: logged,
    and the deploy goes on."""
    import os

    from botocore.exceptions import BotoCoreError, ClientError

    from onceonly_app.db import alarm_clocks
    from onceonly_app.runtime import settings
    from onceonly_app.runtime.aws import bounded_client

    jobs = alarm_clocks.services()
    if not jobs:
        return
    namespace = settings.metrics_namespace(os.environ)
    try:
        sent = alarm_clocks.start_clocks(bounded_client("cloudwatch"), namespace, jobs, retry_queue_depth)
    except (BotoCoreError, ClientError) as exc:
        logger.warning("the stale alarms' clocks were not started; they may show ALARM until each job's first "
                       "run", extra={"error": f"{type(exc).__name__}: {exc}"})
    else:
        logger.info("stale alarms' clocks started", extra={"samples": sent, "namespace": namespace})


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return custom_resource.handle(event, lambda: context.get_remaining_time_in_millis() / 1000, _load)
