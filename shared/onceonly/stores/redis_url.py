"""The options a Redis store URL accepts, in one table: onceonly's own (named by
the store, which checks their values) and the redis-py options passed through,
each checked here. Anything else, a bad value or a database path that is not a
number is a ConfigError naming it, raised by ``connect()``: redis-py would turn
an unknown option into a TypeError on every call, and read ``/abc`` as
database 0. docs/coordination.md, "Store URL options", lists them."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import ConfigError

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


def split_url(url: str, store_options: Iterable[str]) -> tuple[str, dict[str, str]]:
    """The URL for redis-py (its options checked), and the store's own options
    (``store_options``; their values are the store's to check). A repeated
    option: the last one wins, for both."""
    try:
        parts = urlsplit(url)
        options = dict(parse_qsl(parts.query, keep_blank_values=True))
    except ValueError as exc:
        raise ConfigError(f"malformed Redis URL: {exc}") from exc
    own = set(store_options)
    accepted = {**DRIVER_OPTIONS, **(TLS_OPTIONS if parts.scheme.lower() == "rediss" else {})}
    for name, raw in options.items():
        if name in own:
            continue
        check = accepted.get(name)
        if check is None:
            tls = " (only with rediss://)" if name in TLS_OPTIONS else ""
            raise ConfigError(f"unknown redis URL option {name!r}{tls}; accepted: "
                              f"{', '.join(sorted([*own, *accepted]))}")
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
