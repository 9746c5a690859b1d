"""The stale alarms count samples: each tick a job completes publishes one
``ticks_run`` sample, each run of the retry function one ``retry_queue_depth``
sample, and no sample for a whole window is a stall. A stack just created has
none yet (the daily job may be a day away), and the alarms used to start in
ALARM. So the schema step, which every deploy runs before the functions and
the alarms exist, publishes one sample for each: ``ticks_run`` 0 (no tick ran:
the sum stays true) and the retry queue's real depth. Each alarm's window
then starts at the deploy: quiet until a schedule's first run is due, in
ALARM one window after the last run (or after the deploy, if none came).

CloudWatch evaluates complete periods, and the period the deploy falls in is
not complete yet: each sample is sent dated one period back, once for each
period the template's stale alarms use (``PERIODS``), so every alarm's first
evaluation already finds it."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import Any

from onceonly_app.runtime.settings import names

SERVICES_VARIABLE = "STALE_ALARM_SERVICES"  # the template's: the tick jobs whose ticks_run the alarms count
RETRY_SERVICE = "webhook-retry"
PERIODS = (60, 300, 3600)  # seconds: the Period of each stale alarm in template.yaml


def services() -> list[str]:
    """The tick jobs to start the clocks of; none where the template did not say (local runs)."""
    return list(names(os.environ, SERVICES_VARIABLE))


def start_clocks(client: Any, namespace: str, jobs: list[str], retry_queue_depth: int,
                 now: float | None = None) -> int:
    """One PutMetricData call; returns the number of samples sent."""
    now = time.time() if now is None else now
    data = []
    for period in PERIODS:
        at = datetime.fromtimestamp(now - period, UTC)
        data += [_sample("ticks_run", job, 0, at) for job in jobs]
        data.append(_sample("retry_queue_depth", RETRY_SERVICE, retry_queue_depth, at))
    client.put_metric_data(Namespace=namespace, MetricData=data)
    return len(data)


def _sample(name: str, service: str, value: float, at: datetime) -> dict[str, Any]:
    return {"MetricName": name, "Dimensions": [{"Name": "service", "Value": service}], "Value": value,
            "Unit": "Count", "Timestamp": at}
