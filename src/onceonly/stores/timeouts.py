"""One time bound for every store operation, set by the URL's ``timeout`` option
(seconds, default :data:`DEFAULT_TIMEOUT`), and how each driver's own timeouts
are sized so that an operation on a store that stopped answering fails with
StoreUnavailableError within it. docs/coordination.md explains the split."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import ConfigError
from ._common import check_seconds

DEFAULT_TIMEOUT = 10.0
# A Lambda function runs for at most 15 minutes: a longer bound is a mistake.
MAX_TIMEOUT = 900.0
TIMEOUT_OPTION = "timeout"
# botocore's standard retry mode sleeps up to 2**(attempt-1) s before a retry:
# at most 1 s before the second attempt.
_DYNAMODB_FIRST_BACKOFF = 1.0
# Below this a second DynamoDB attempt would leave each one too little time.
_DYNAMODB_RETRY_FLOOR = 4.0


def timeout_from(options: Mapping[str, str]) -> float:
    """The ``timeout`` option of a store URL's query, or the default."""
    raw = options.get(TIMEOUT_OPTION)
    if raw is None:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigError(f"store URL option {TIMEOUT_OPTION} must be seconds, got {raw!r}") from exc
    seconds = check_seconds(value, f"store URL option {TIMEOUT_OPTION}")
    if seconds > MAX_TIMEOUT:
        raise ConfigError(f"store URL option {TIMEOUT_OPTION} must be at most {MAX_TIMEOUT:g} s, got {raw!r}")
    return seconds


def dynamodb_budget(total: float) -> tuple[int, float, float]:
    """(attempts, connect timeout, read timeout) for botocore, so that every
    attempt plus the backoff between them fits within ``total``. Two attempts
    when there is room (a throttled or reset request is worth one retry),
    otherwise one."""
    attempts = 2 if total >= _DYNAMODB_RETRY_FLOOR else 1
    per_attempt = (total - _DYNAMODB_FIRST_BACKOFF * (attempts - 1)) / attempts
    connect = min(2.0, per_attempt / 3)
    return attempts, connect, per_attempt - connect
