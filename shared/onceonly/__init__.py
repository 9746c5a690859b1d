"""onceonly: leases with fencing tokens, atomic due queues and a cron guard for
Lambda functions that run on many concurrent invocations."""

from .api import Claim, ClaimBatch, Lease, LeaseState, LeaseStore, Permit, Queue, QueueDepth, Store
from .connect import connect
from .errors import (
    ConfigError,
    LeaseLostError,
    OnceOnlyError,
    StoreNotReadyError,
    StoreRefusedError,
    StoreUnavailableError,
)
from .scheduled import InvalidEventError, Tick, scheduled
from .stores._common import check_seconds

__version__ = "0.2.0"

__all__ = [
    "__version__",
    "Claim",
    "ClaimBatch",
    "ConfigError",
    "Lease",
    "LeaseLostError",
    "LeaseState",
    "LeaseStore",
    "OnceOnlyError",
    "Permit",
    "Queue",
    "QueueDepth",
    "Store",
    "StoreNotReadyError",
    "StoreRefusedError",
    "StoreUnavailableError",
    "check_seconds",  # the layer's ttl check, for settings that feed it
    "connect",
    "InvalidEventError", "Tick", "scheduled",  # the cron guard (scheduled.py)
]
