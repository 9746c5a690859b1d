"""The options of a PostgreSQL URL: onceonly's own (``timeout``, ``pool_mode``,
taken out by :func:`split_options`) and the libpq keywords it passes on
(:data:`DRIVER_OPTIONS`); any other is refused with ConfigError naming it.
libpq checks some values only when it connects: those are checked here
(:func:`check_values`), when the store or pool is built, so that a bad one is
a ConfigError at ``connect()``, not a StoreUnavailableError after the pool's
wait on every call. docs/coordination.md, "Store URL options"."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg

from ...errors import ConfigError
from ..options import refuse_unknown
from ..timeouts import DEFAULT_TIMEOUT, TIMEOUT_OPTION, timeout_from
from .connection import is_rds_proxy_host

STORE = "PostgreSQL"
POOL_MODE_OPTION = "pool_mode"
POOL_MODES = ("session", "transaction")
# onceonly's own options; libpq would refuse them.
OWN_OPTIONS = (TIMEOUT_OPTION, POOL_MODE_OPTION)

_TLS_VERSIONS = ("tlsv1", "tlsv1.1", "tlsv1.2", "tlsv1.3")
# option -> the values libpq accepts (compared as libpq does: case matters
# except for the TLS versions).
CHOICES: dict[str, tuple[str, ...]] = {
    "sslmode": ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
    "gssencmode": ("disable", "prefer", "require"),
    "target_session_attrs": ("any", "read-write", "read-only", "primary", "standby", "prefer-standby"),
    "channel_binding": ("disable", "prefer", "require"),
    "load_balance_hosts": ("disable", "random"),
    "sslnegotiation": ("postgres", "direct"),
    "sslcertmode": ("disable", "allow", "require"),
    "sslcompression": ("0", "1"),
    "sslsni": ("0", "1"),
    "requiressl": ("0", "1"),
}
CASELESS_CHOICES: dict[str, tuple[str, ...]] = {
    "ssl_min_protocol_version": _TLS_VERSIONS,
    "ssl_max_protocol_version": _TLS_VERSIONS,
}
INTEGERS = ("connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
            "tcp_user_timeout")
# The libpq keywords passed on: connection, authentication, TLS, keepalive and
# session ones. Not replication, and nothing libpq does not know.
DRIVER_OPTIONS = frozenset({
    "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "require_auth", "channel_binding",
    "connect_timeout", "client_encoding", "options", "application_name", "fallback_application_name",
    "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout",
    "gssencmode", "sslmode", "requiressl", "sslnegotiation", "sslcompression", "sslcert", "sslkey",
    "sslpassword", "sslcertmode", "sslrootcert", "sslcrl", "sslcrldir", "sslsni", "requirepeer",
    "ssl_min_protocol_version", "ssl_max_protocol_version", "krbsrvname", "gsslib", "gssdelegation",
    "service", "target_session_attrs", "load_balance_hosts",
})
ACCEPTED = frozenset({*OWN_OPTIONS, *DRIVER_OPTIONS})
_INTEGER = re.compile(r"^\s*\d+\s*$")
_AUTH_METHOD = re.compile(r"^!?(password|md5|gss|sspi|scram-sha-256|oauth|none)$")


@dataclass(frozen=True)
class PgOptions:
    """onceonly's own options of a PostgreSQL URL (libpq would refuse them)."""

    timeout: float = DEFAULT_TIMEOUT
    transaction_pooled: bool = False


def split_options(url: str) -> tuple[str, PgOptions]:
    """The conninfo without onceonly's options (``timeout``, ``pool_mode``), and
    those options. A key=value conninfo (not a URL) carries none: the defaults
    apply, except that an RDS Proxy host implies ``pool_mode=transaction``.
    Raises ConfigError for a malformed URL or an option not in :data:`ACCEPTED`."""
    url = url.strip()
    if "://" not in url:
        return url, PgOptions(transaction_pooled=_behind_rds_proxy(url))
    try:
        parts = urlsplit(url)
        options = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError as exc:
        raise ConfigError(f"malformed PostgreSQL URL: {exc}") from exc
    given = dict(options)
    refuse_unknown(STORE, given, ACCEPTED)
    mode = given.get(POOL_MODE_OPTION, "session")
    if mode not in POOL_MODES:
        # statement mode refuses transactions of more than one statement
        raise ConfigError(f"PostgreSQL URL option {POOL_MODE_OPTION} must be one of {', '.join(POOL_MODES)}, "
                          f"got {mode!r}")
    # quote, not quote_plus: libpq does not read "+" as a space
    driver_query = urlencode([(key, value) for key, value in options if key not in OWN_OPTIONS], quote_via=quote)
    conninfo = urlunsplit(parts._replace(query=driver_query))
    return conninfo, PgOptions(timeout=timeout_from(given),
                               transaction_pooled=mode == "transaction" or _behind_rds_proxy(conninfo))


def _behind_rds_proxy(conninfo: str) -> bool:
    try:
        return is_rds_proxy_host(conninfo)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(f"malformed PostgreSQL URL: {exc}") from exc


def check_values(given: Mapping[str, object]) -> None:
    """Raise ConfigError naming the first option of the parsed conninfo
    ``given`` that onceonly does not pass on, or whose value libpq would
    refuse at connect time. An empty value is libpq's "not set"."""
    refuse_unknown(STORE, given, DRIVER_OPTIONS)
    for name, value in given.items():
        raw = str(value) if value is not None else ""
        if raw == "":
            continue
        if name in CHOICES and raw not in CHOICES[name]:
            raise _bad(name, raw, f"one of {', '.join(CHOICES[name])}")
        if name in CASELESS_CHOICES and raw.lower() not in CASELESS_CHOICES[name]:
            raise _bad(name, raw, "one of TLSv1, TLSv1.1, TLSv1.2, TLSv1.3")
        if name in INTEGERS and not _INTEGER.match(raw):
            raise _bad(name, raw, "a whole number")
        if name == "port" and not all(p.strip() == "" or _valid_port(p) for p in raw.split(",")):
            raise _bad(name, raw, "a port number from 1 to 65535 (one per host, comma-separated)")
        if name == "require_auth" and not all(_AUTH_METHOD.match(m.strip()) for m in raw.split(",")):
            raise _bad(name, raw, "a comma-separated list of password, md5, gss, sspi, scram-sha-256, none"
                                  " (each may start with !)")


def _valid_port(raw: str) -> bool:
    return bool(_INTEGER.match(raw)) and 1 <= int(raw) <= 65535


def _bad(name: str, raw: str, expected: str) -> ConfigError:
    return ConfigError(f"PostgreSQL URL option {name} must be {expected}, got {raw!r}")
