"""The one reader of the functions' settings: environment variables, parsed by
one set of parsers so that the same kind of value means the same everywhere.

Every setting class has ``from_env(env=os.environ)``; a handler calls it at cold
start, and a test sets the environment (or passes a mapping) instead of
patching code. docs/configuration.md lists every variable.

Rules: a duration's name ends in ``_SECONDS`` (a list of durations too); an
unset or empty variable keeps its default; a value that does not parse is a
ConfigError naming the variable, never a silent default.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from onceonly import check_seconds
from onceonly.errors import ConfigError

Env = Mapping[str, str]

DEFAULT_METRICS_NAMESPACE = "onceonly"
_TRUE = ("true", "1")
_FALSE = ("false", "0")


def refuse_renamed(env: Env, renamed: Mapping[str, str]) -> None:
    """ConfigError when a variable is set under a name it no longer has
    (``renamed``: old -> new): ignoring it would silently drop an operator's
    setting after an upgrade."""
    stale = sorted(old for old in renamed if text(env, old) is not None)
    if stale:
        raise ConfigError("renamed settings: " + ", ".join(f"{old} is now {renamed[old]}" for old in stale))


def text(env: Env, name: str, default: str | None = None) -> str | None:
    """The variable's value, stripped; ``default`` when unset or empty."""
    value = (env.get(name) or "").strip()
    return value or default


def required(env: Env, name: str) -> str:
    """The variable's value; ConfigError when unset or empty."""
    value = text(env, name)
    if value is None:
        raise ConfigError(f"set {name}")
    return value


def seconds(env: Env, name: str, default: float) -> float:
    """A positive, finite number of seconds."""
    raw = text(env, name)
    return default if raw is None else _seconds(name, raw)


def optional_seconds(env: Env, name: str) -> float | None:
    """As :func:`seconds`, None when unset."""
    raw = text(env, name)
    return None if raw is None else _seconds(name, raw)


def seconds_list(env: Env, name: str, default: tuple[float, ...]) -> tuple[float, ...]:
    """Comma-separated positive seconds (a schedule)."""
    raw = text(env, name)
    if raw is None:
        return default
    return tuple(_seconds(name, part) for part in raw.split(","))


def count(env: Env, name: str, default: int) -> int:
    """A whole number of at least 1."""
    raw = text(env, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {raw!r}") from None
    if value < 1:
        raise ConfigError(f"{name} must be >= 1, got {raw!r}")
    return value


def flag(env: Env, name: str, default: bool) -> bool:
    """``true``/``false`` (or ``1``/``0``), any case."""
    raw = text(env, name)
    if raw is None:
        return default
    if raw.lower() not in (*_TRUE, *_FALSE):
        raise ConfigError(f"{name} must be true or false, got {raw!r}")
    return raw.lower() in _TRUE


def names(env: Env, name: str) -> tuple[str, ...]:
    """Comma-separated names (blank ones dropped), in order."""
    return tuple(part.strip() for part in (text(env, name) or "").split(",") if part.strip())


def metrics_namespace(env: Env) -> str:
    """The CloudWatch namespace of the functions' metrics (Powertools' variable)."""
    return text(env, "POWERTOOLS_METRICS_NAMESPACE") or DEFAULT_METRICS_NAMESPACE


def _seconds(name: str, raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{name} must be a positive number of seconds, got {raw!r}")
    return check_seconds(value, name)
