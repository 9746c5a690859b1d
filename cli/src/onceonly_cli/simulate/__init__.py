"""`onceonly simulate`: the real functions as replica processes, fed duplicates
and crashes by a local stand-in for SQS and EventBridge, checked afterwards.

The Python entry is ``run(SimulationConfig(...)) -> Report``; the command line
(commands/simulate.py) only maps its options onto a SimulationConfig.

- config: SimulationConfig, what a run is asked to do
- runner: one run (or one per store, compared): stack, seed, drive, judge
- stack, run_scope: the servers and the run's own database and store
- functions, replica, replicas: the functions as pools of replica processes
- events: SQS batches and EventBridge scheduled events, in AWS's shapes
- loadgen, sqs_bridge, schedule, drain: the SQS and EventBridge stand-ins and when a run is done
- tenants, webhook_load, billing_load, payments_load, recovery_load: what a run seeds and feeds
- plan, *_checks: the domain invariants of the seeded scenarios
- metrics_capture: the functions' EMF metrics, per invocation
- report (Report, build_report), report_text, html_report, comparison: the verdict and its renderings"""

from __future__ import annotations

from .config import SimulationConfig
from .report import Report

__all__ = ["Report", "SimulationConfig", "run"]


def run(config: SimulationConfig) -> Report:
    """Run the simulation ``config`` describes and return its judged report."""
    from .runner import run as run_simulation

    return run_simulation(config)
