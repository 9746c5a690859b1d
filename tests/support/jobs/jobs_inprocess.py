"""Run a job's domain code in this process through the real cron guard: the
integration tests' way to exercise SQL and semantics without spawning."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onceonly
from tests.support.functions.events import scheduled_event


def run_tick(store: onceonly.Store, job: str, when: str, body: Callable[[onceonly.Tick], Any]) -> dict[str, Any]:
    """Invoke ``body(tick)`` for the tick ``job`` @ ``when``; the guard's report."""
    handler = onceonly.scheduled(store, job=job, ttl=60)(lambda event, context, tick: body(tick))
    return handler(scheduled_event("overdue_invoices", when), None)
