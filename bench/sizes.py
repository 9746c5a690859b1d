"""How big each part of the suite is: the full run (the default) and the smoke
run (``--smoke``: tiny sizes, one repetition, for CI). Only this file knows the
numbers; docs/benchmarks.md prints the ones a run used."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

STORES = ("postgresql", "redis", "dynamodb")


@dataclass(frozen=True)
class Sizes:
    repeat: int  # runs per figure: its median, min and max are reported
    batches: tuple[int, ...]
    processes: tuple[int, ...]
    # items per claim run, by store and batch size: 20,000 where a batch
    # carries many items. Batch 1 costs two round trips per item, so fewer
    # items keep it to seconds; dynalite is a single-threaded Node.js server
    # about 100x slower than the others.
    items: dict[str, dict[int, int]]
    headline_batch: int  # the targets' batch and process count
    headline_processes: int
    backlog: dict[str, tuple[int, ...]]  # items queued, most not yet due
    backlog_due: dict[str, int]  # of those, due at each probe
    lock_items: int  # redis-py Lock per item: three round trips per item
    procrastinate_jobs: int
    idempotency_records: int
    idempotency_processes: tuple[int, ...]
    replicas: tuple[int, ...]
    replica_events: int
    receiver_latency: float = 0.05
    racy_processes: tuple[int, ...] = field(default=(1, 4, 8))  # the racy two-step pop
    # Cost per delivery: SQS batches of 10 per replica, by receiver latency (fewer
    # where the serial path takes 10 x latency per batch), and the replica counts.
    delivery_batches: dict[float, int] = field(default_factory=lambda: {0.05: 6, 0.2: 4, 1.0: 2})
    delivery_replicas: tuple[int, ...] = (1, 2, 4)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


FULL = Sizes(
    repeat=3,
    batches=(1, 25, 100),
    processes=(1, 4, 8),
    items={
        "postgresql": {1: 1_000, 25: 20_000, 100: 20_000},
        "redis": {1: 5_000, 25: 20_000, 100: 20_000},
        "dynamodb": {1: 300, 25: 600, 100: 600},
    },
    headline_batch=25,
    headline_processes=4,
    backlog={"postgresql": (2_000, 20_000, 100_000), "redis": (2_000, 20_000, 100_000),
             "dynamodb": (1_000, 4_000)},
    backlog_due={"postgresql": 500, "redis": 500, "dynamodb": 100},
    lock_items=5_000,
    procrastinate_jobs=1_000,
    idempotency_records=400,
    idempotency_processes=(1, 4),
    replicas=(1, 2, 4, 8),
    # SQS batches of 10: 100 events (~12 batches with duplicates) are two rounds
    # at 8 replicas, so 6x was the ceiling; 400 are ~46 batches, 6 rounds.
    replica_events=400,
)

SMOKE = Sizes(
    repeat=1,
    batches=(1, 25),
    processes=(2,),
    items={
        "postgresql": {1: 10, 25: 60},
        "redis": {1: 10, 25: 60},
        "dynamodb": {1: 4, 25: 30},
    },
    headline_batch=25,
    headline_processes=2,
    backlog={"postgresql": (60, 200), "redis": (60, 200), "dynamodb": (30, 60)},
    backlog_due={"postgresql": 30, "redis": 30, "dynamodb": 10},
    lock_items=60,
    procrastinate_jobs=20,
    idempotency_records=10,
    idempotency_processes=(2,),
    replicas=(1,),
    replica_events=2,
    racy_processes=(2,),
    delivery_batches={0.05: 1, 0.2: 1},
    delivery_replicas=(1, 2),
)
