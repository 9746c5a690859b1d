"""SchemaMigrationFunction: the CloudFormation custom resource behind every
deploy. Applies the domain migrations and the coordination store's setup()
before any other function runs (they depend on it), and answers CloudFormation
SUCCESS or FAILED (onceonly_app.appdb.custom_resource)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

from onceonly_app.appdb import custom_resource
from onceonly_app.appdb.schema import apply_schema
from onceonly_app.appdb.settings import database_url, store_url

logger = Logger(service="schema-migration")
tracer = Tracer(service="schema-migration")  # X-Ray when the template turns tracing on


def apply() -> dict[str, str]:
    report = apply_schema(database_url(), store_url())
    return {"MigrationsApplied": ",".join(report.migrations_applied) or "none", "StoreKind": report.store_kind}


@tracer.capture_lambda_handler
@logger.inject_lambda_context(log_event=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return custom_resource.handle(event, lambda: context.get_remaining_time_in_millis() / 1000, apply, logger)
