"""onceonly: leases with fencing tokens, atomic due queues and a cron guard for
Lambda functions that run on many concurrent invocations.

The public surface is this module and, for one kind of store each (importing
one imports its driver), ``onceonly.postgres``, ``onceonly.redis`` and
``onceonly.dynamodb``. ``onceonly.stores`` is the stores' implementation:
nothing outside the library imports it."""

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
from .stores._common import MAX_SECONDS, check_seconds, encode_payload


def __getattr__(name: str) -> str:
    # The version is stated once, in pyproject.toml; read from the installed
    # metadata only when asked, so a cold start never pays for it.
    if name == "__version__":
        from importlib.metadata import version

        return version("onceonly")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    "MAX_SECONDS",  # the longest ttl, lease or keep any store takes (ten years)
    "check_seconds",  # the layer's ttl check, for settings that feed it
    "encode_payload",  # a payload as every store keeps it (strict JSON text), size-checked
    "connect",
    "InvalidEventError", "Tick", "scheduled",  # the cron guard (scheduled.py)
]
