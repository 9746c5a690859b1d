"""Argument checks and helpers every backend shares, so that bad input fails the
same way, with the same message, on every store."""

from __future__ import annotations

import json
import math
import secrets
from typing import Any

from ..api import Claim
from ..errors import ConfigError

MAX_NAME_LENGTH = 512
# Ten years: past this a ttl is a bug, and some stores would overflow their
# integer milliseconds instead of failing.
MAX_SECONDS = 10 * 365 * 86400


def new_owner() -> str:
    """A random owner id per grant: never a hostname, so two containers on one
    host (or one container reused) cannot pass for each other."""
    return secrets.token_hex(8)


def check_name(name: str, what: str = "name") -> str:
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{what} must be a non-empty string, got {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise ConfigError(f"{what} is longer than {MAX_NAME_LENGTH} characters")
    return name


def check_seconds(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{what} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{what} must be a positive number of seconds, got {value!r}")
    if value > MAX_SECONDS:
        raise ConfigError(f"{what} must be at most {MAX_SECONDS} seconds (ten years), got {value!r}")
    return float(value)


def check_flag(value: bool, what: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{what} must be True or False, got {value!r}")
    return value


def check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"limit must be a positive integer, got {limit!r}")
    return limit


def check_due_at(due_at: float | None) -> float | None:
    if due_at is None:
        return None
    if isinstance(due_at, bool) or not isinstance(due_at, (int, float)) or not math.isfinite(due_at):
        raise ConfigError(f"due_at must be epoch seconds or None, got {due_at!r}")
    return float(due_at)


def encode_payload(payload: Any) -> str:
    try:
        return json.dumps(payload, separators=(",", ":"), sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"payload must be JSON-serialisable: {exc}") from exc


def decode_payload(text: str | bytes | None) -> Any:
    return None if text is None else json.loads(text)


def grant_key(claim: Claim) -> tuple[str, int, str]:
    """What identifies one grant of an item: a stale and a fresh claim differ."""
    return (claim.item_id, claim.token, claim.owner)
