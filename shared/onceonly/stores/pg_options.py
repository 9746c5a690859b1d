"""Values of libpq's connection options that libpq itself checks only when it
connects. Checked here, when the store or pool is built, so that a bad one is
a ConfigError naming the option at ``connect()``, not a StoreUnavailableError
after the pool's wait on every call. libpq refuses an unknown option name
while parsing the URL already. docs/coordination.md, "Store URL options"."""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..errors import ConfigError

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
_INTEGER = re.compile(r"^\s*\d+\s*$")
_AUTH_METHOD = re.compile(r"^!?(password|md5|gss|sspi|scram-sha-256|oauth|none)$")


def check_values(given: Mapping[str, object]) -> None:
    """Raise ConfigError naming the first option of the parsed conninfo
    ``given`` whose value libpq would refuse at connect time. An empty value
    is libpq's "not set"."""
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
