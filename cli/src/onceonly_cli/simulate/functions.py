"""Which real functions the replicas load: read from template.yaml, so the
simulation runs exactly what `sam deploy` ships (handler, code, timeout, env)."""

from __future__ import annotations

from pathlib import Path

from ..errors import CliError
from ..local.template import FunctionSpec, TemplateError, find_function, function_ids, load_template

DISPATCH = "WebhookDispatchFunction"
RETRY = "WebhookRetryFunction"
# Scheduled jobs guarded by onceonly.scheduled, and their job names (tick lock prefixes).
CRON_JOBS = {
    "OverdueInvoicesFunction": "overdue-invoices",
    "NotificationsFunction": "notifications",
    "RecurringBillingFunction": "recurring-billing",
    "PaymentWatcherFunction": "payment-watcher",
}
# Until a function is declared in the template, its folder is enough to load it.
FALLBACK_DIRS = {
    DISPATCH: "webhook_dispatch",
    RETRY: "webhook_retry",
    "OverdueInvoicesFunction": "overdue_invoices",
    "NotificationsFunction": "notifications",
    "RecurringBillingFunction": "recurring_billing",
    "PaymentWatcherFunction": "payment_watcher",
}
FALLBACK_TIMEOUT = 60.0


def simulated_functions(template: Path) -> dict[str, FunctionSpec]:
    """The known functions that exist, by logical id. Raises CliError without the dispatcher."""
    try:
        declared = set(function_ids(load_template(template)))
    except TemplateError as exc:
        raise CliError(str(exc)) from None
    root = template.resolve().parent
    specs: dict[str, FunctionSpec] = {}
    for logical_id, folder in FALLBACK_DIRS.items():
        if logical_id in declared:
            specs[logical_id] = find_function(template, logical_id)
        elif (root / "functions" / folder / "app.py").exists():
            specs[logical_id] = FunctionSpec(logical_id, root / "functions" / folder, "app.handler",
                                             FALLBACK_TIMEOUT, 256, layers=())
    if DISPATCH not in specs:
        raise CliError(f"{template} has no {DISPATCH} (and functions/webhook_dispatch is missing)")
    return specs
