"""onceonly: leases with fencing tokens, atomic due queues and a cron guard for
Lambda functions that run on many concurrent invocations."""

from .api import Claim, Lease, LeaseState, Queue, QueueDepth, Store
from .connect import connect
from .errors import (
    ConfigError,
    LeaseLostError,
    OnceOnlyError,
    StoreNotReadyError,
    StoreUnavailableError,
)
from .scheduled import InvalidEventError, Tick, scheduled

__all__ = [
    "Claim",
    "ConfigError",
    "Lease",
    "LeaseLostError",
    "LeaseState",
    "OnceOnlyError",
    "Queue",
    "QueueDepth",
    "Store",
    "StoreNotReadyError",
    "StoreUnavailableError",
    "connect",
    "InvalidEventError", "Tick", "scheduled",  # the cron guard (scheduled.py)
]
