"""Run the billing jobs' real handlers on one tenant and under a job name of the
caller's choosing, without a knob for it in the deployed code.

Deployed, every job works on every tenant under its fixed name. Tests on a
database and coordination store that other tests share need a slice of their
own: a tenant (so a test never moves another test's invoices) and a job name
(the tick locks, `job_ticks` and the payment cursor are keyed by it).
`onceonly simulate` needs neither: each run has a database and store of its
own. Call
:func:`scope_billing_jobs` in the process that runs the handlers, before it
loads them: the handlers read their settings when their module is imported.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import replace
from typing import Any

# The job modules whose ``run(..., tenant=None)`` the handlers call.
JOB_MODULES = ("overdue", "recurring", "notifications", "payment_watcher")


def scope_billing_jobs(*, tenant: str | None = None, job: str | None = None) -> None:
    """From now on in this process: every billing job's ``run`` works on
    ``tenant`` only, and every handler loaded afterwards uses ``job`` as its job
    name (both only when given)."""
    if tenant is not None:
        for name in JOB_MODULES:
            module: Any = importlib.import_module(f"onceonly_app.billing.{name}")
            module.run = functools.partial(module.run, tenant=tenant)  # the handlers call module.run
    if job is not None:
        from onceonly_app.billing.config import JobSettings

        deployed = JobSettings.from_env

        def renamed(cls: type[JobSettings], default_job: str) -> Any:
            return replace(deployed(default_job), job=job)

        JobSettings.from_env = classmethod(renamed)  # type: ignore[method-assign, assignment]
