"""The options a Redis store URL accepts, in one table: onceonly's own
(:data:`STORE_OPTIONS`, whose values the store checks with :func:`flag` and
:func:`whole_number`) and the redis-py options passed through, each checked
here. Anything else, a bad value or a database path that is not a
number is a ConfigError naming it, raised by ``connect()``: redis-py would turn
an unknown option into a TypeError on every call, and read ``/abc`` as
database 0. docs/coordination.md, "Store URL options", lists them."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ...errors import ConfigError
from ..options import refuse_unknown
from ..timeouts import TIMEOUT_OPTION

STORE = "Redis"
DEFAULT_PREFIX = "onceonly"
DEFAULT_WAIT_TIMEOUT_MS = 1000
ALLOW_EVICTION_OPTION = "allow_eviction"
CLUSTER_OPTION = "cluster"
# URL options onceonly reads itself (the store checks their values); the
# driver's below go to redis-py.
STORE_OPTIONS = ("prefix", TIMEOUT_OPTION, "wait_replicas", "wait_timeout_ms", ALLOW_EVICTION_OPTION, CLUSTER_OPTION)
_BOOLEANS = {"1": True, "true": True, "0": False, "false": False}

_FLAGS = {"1": "true", "true": "true", "yes": "true", "0": "false", "false": "false", "no": "false"}
_DATABASE_PATH = re.compile(r"^/?(\d*)$")


def _whole(minimum: int, maximum: int | None = None) -> Callable[[str], str]:
    def check(raw: str) -> str:
        if not raw.strip().isdigit() or int(raw) < minimum or (maximum is not None and int(raw) > maximum):
            upper = f" from {minimum} to {maximum}" if maximum is not None else f" of {minimum} or more"
            raise ValueError(f"a whole number{upper}")
        return raw.strip()
    return check


def _seconds(raw: str) -> str:
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ValueError("a positive number of seconds")
    return raw


def _flag(raw: str) -> str:
    value = _FLAGS.get(raw.strip().lower())
    if value is None:
        raise ValueError("1, true, yes, 0, false or no")
    return value


def _one_of(*values: str) -> Callable[[str], str]:
    def check(raw: str) -> str:
        if raw not in values:
            raise ValueError(f"one of {', '.join(values)}")
        return raw
    return check


def _text(raw: str) -> str:
    return raw


# redis-py's options, as onceonly passes them on: name -> check of the value.
DRIVER_OPTIONS: dict[str, Callable[[str], str]] = {
    "db": _whole(0),
    "socket_timeout": _seconds,
    "socket_connect_timeout": _seconds,
    "socket_keepalive": _flag,
    "health_check_interval": _whole(0),
    "max_connections": _whole(1),
    "client_name": _text,
    "protocol": _one_of("2", "3"),
    "username": _text,
    "password": _text,
}
# Only with rediss:// (redis-py's plain connection refuses them). Nothing
# that turns certificate or host name checks off.
TLS_OPTIONS: dict[str, Callable[[str], str]] = {
    "ssl_ca_certs": _text,
    "ssl_ca_path": _text,
    "ssl_certfile": _text,
    "ssl_keyfile": _text,
}


def split_url(url: str) -> tuple[str, dict[str, str]]:
    """The URL for redis-py (its options checked), and the store's own options
    (:data:`STORE_OPTIONS`; their values are the store's to check, with
    :func:`flag` and :func:`whole_number`). A repeated option: the last one
    wins, for both. Any other option is refused."""
    try:
        parts = urlsplit(url)
        options = dict(parse_qsl(parts.query, keep_blank_values=True))
    except ValueError as exc:
        raise ConfigError(f"malformed Redis URL: {exc}") from exc
    own = set(STORE_OPTIONS)
    accepted = {**DRIVER_OPTIONS, **(TLS_OPTIONS if parts.scheme.lower() == "rediss" else {})}
    refuse_unknown(STORE, options, {*own, *accepted}, notes=dict.fromkeys(TLS_OPTIONS, " (only with rediss://)"))
    for name, raw in options.items():
        if name in own:
            continue
        check = accepted[name]
        try:
            options[name] = check(raw)
        except ValueError as exc:
            raise ConfigError(f"redis URL option {name} must be {exc}, got {raw!r}") from None
    database = _DATABASE_PATH.match(parts.path)
    if database is None:
        raise ConfigError(f"redis URL path must be /DB (a database number), got {parts.path!r}")
    if parts.fragment:
        raise ConfigError(f"redis URL must not have a #fragment, got {parts.fragment!r}")
    driver_query = urlencode([(name, value) for name, value in options.items() if name not in own])
    return urlunsplit(parts._replace(query=driver_query)), {k: v for k, v in options.items() if k in own}


def flag(options: Mapping[str, str], name: str) -> bool:
    """A store option that is on or off (off when absent)."""
    raw = options.get(name)
    if raw is None:
        return False
    value = _BOOLEANS.get(raw.strip().lower())
    if value is None:
        raise ConfigError(f"redis option {name} must be 1, true, 0 or false, got {raw!r}")
    return value


def whole_number(options: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    """A store option that is a whole number of at least ``minimum``."""
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise ConfigError(f"redis option {name} must be a whole number >= {minimum}, got {raw!r}")
    return value
