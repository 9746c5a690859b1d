"""What one `onceonly simulate` run is asked to do: simulate.run's only argument."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SimulationConfig:
    """A simulation's settings; the defaults are the command line's."""

    # A PostgreSQL server URL: each run creates a database of its own there, dropped
    # at the end (None: an embedded PostgreSQL of the run's own).
    database: str | None = None
    # The coordination store: a URL (the run keeps to a prefix or table of its own),
    # a keyword (postgresql, redis, dynamodb: a fresh local stand-in; redis-cluster;
    # all: each of the first three in turn, compared), or None: the run's database.
    store: str | None = None
    events: int = 200  # webhook events to feed
    replicas: int = 4  # execution environments per function
    receiver_latency: float = 0.005  # seconds the receiver takes per request
    failure_rate: float = 0.1  # share of receiver responses that are 500s
    crash_rate: float = 0.1  # chance that a replica is SIGKILLed during an invocation
    seed: int | None = None  # None: a random one (the report names it)
    stall_limit: float = 20  # seconds without progress before the run fails
    time_limit: float = 300  # seconds before the run fails, progressing or not
    log_dir: Path | None = None  # keep the replicas' logs here (None: a temporary folder, removed)
    log_level: str = "WARNING"  # the functions' POWERTOOLS_LOG_LEVEL
