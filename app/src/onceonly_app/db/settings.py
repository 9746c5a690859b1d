"""Where the functions find their stores, read through the one settings reader
(runtime/settings.py; docs/configuration.md). Locally: plain env vars. On AWS: the
URL sits in Secrets Manager (or SSM) and is read through Powertools Parameters,
cached per warm container, never put in a plain env var.

A secret holds either a URL or the JSON that RDS and its rotation functions
write (``username``, ``password``, ``host``, ``port``, ``dbname``). An
RDS-managed master secret holds only ``username`` and ``password``: the rest
comes from ``DATABASE_HOST``, ``DATABASE_PORT`` and ``DATABASE_NAME``.

PostgreSQL TLS: a URL built from JSON gets ``sslmode=$DATABASE_SSLMODE``
(default ``verify-full``). Any PostgreSQL URL that verifies the server
(``verify-ca``/``verify-full``) without its own ``sslrootcert`` uses the RDS CA
bundle shipped in the layer (``certs/rds-global-bundle.pem``, see docs/deploy.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from onceonly.errors import ConfigError
from onceonly_app.runtime.settings import Env, text

CACHE_SECONDS = 300
CA_BUNDLE = Path(__file__).parent / "certs" / "rds-global-bundle.pem"
VERIFYING_SSLMODES = ("verify-ca", "verify-full")
POSTGRES_SCHEMES = ("postgresql", "postgres")


def _read(direct_var: str, secret_var: str, ssm_var: str, refresh: bool, env: Env) -> str:
    direct = text(env, direct_var)
    if direct:
        return direct
    secret_name = text(env, secret_var)
    if secret_name:
        from aws_lambda_powertools.utilities import parameters

        return str(parameters.get_secret(secret_name, max_age=CACHE_SECONDS, force_fetch=refresh))
    ssm_name = text(env, ssm_var)
    if ssm_name:
        from aws_lambda_powertools.utilities import parameters

        return str(parameters.get_parameter(ssm_name, decrypt=True, max_age=CACHE_SECONDS, force_fetch=refresh))
    raise ConfigError(f"set {direct_var} (local), {secret_var} (a Secrets Manager name) or {ssm_var} (an SSM name)")


def url_from_secret(stored: str, what: str, env: Env = os.environ) -> str:
    """A URL as stored, or one built from an RDS-style JSON secret."""
    stored = stored.strip()
    if not stored.startswith("{"):
        return stored
    try:
        secret = json.loads(stored)
    except ValueError:
        raise ConfigError(f"the {what} secret starts with '{{' but is not valid JSON") from None
    engine = str(secret.get("engine") or "postgres").lower()
    if not engine.startswith("postgres") and engine != "aurora-postgresql":
        raise ConfigError(f"the {what} secret is for engine {engine!r}; onceonly needs PostgreSQL")
    host = secret.get("host") or text(env, "DATABASE_HOST")
    missing = [name for name, value in (("username", secret.get("username")), ("password", secret.get("password")),
                                        ("host (or DATABASE_HOST)", host)) if not value]
    if missing:
        raise ConfigError(f"the {what} secret (JSON) lacks {', '.join(missing)}")
    port = secret.get("port") or text(env, "DATABASE_PORT") or 5432
    dbname = secret.get("dbname") or text(env, "DATABASE_NAME") or "postgres"
    sslmode = text(env, "DATABASE_SSLMODE") or "verify-full"
    credentials = f"{quote(str(secret['username']), safe='')}:{quote(str(secret['password']), safe='')}"
    return f"postgresql://{credentials}@{host}:{port}/{quote(str(dbname), safe='')}?sslmode={quote(sslmode)}"


def with_host(url: str, host: str) -> str:
    """The URL pointed at another host:port (e.g. an RDS Proxy endpoint), same credentials."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{host}" if userinfo else host))


def with_ca_bundle(url: str, bundle: Path = CA_BUNDLE) -> str:
    """A PostgreSQL URL that verifies the server gets the shipped RDS CA bundle
    unless it names its own ``sslrootcert``. ConfigError when it is needed and absent."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in POSTGRES_SCHEMES:
        return url
    options = parse_qsl(parts.query, keep_blank_values=True)
    keys = {key for key, _ in options}
    if dict(options).get("sslmode") not in VERIFYING_SSLMODES or "sslrootcert" in keys:
        return url
    if not bundle.is_file():
        raise ConfigError(
            f"sslmode={dict(options)['sslmode']} needs the RDS CA bundle at {bundle}, which the layer "
            "ships (was it removed from the build? `node scripts/rds-ca-bundle.js` writes it; docs/deploy.md) "
            "or an sslrootcert=… in the URL"
        )
    return urlunsplit(parts._replace(query=urlencode([*options, ("sslrootcert", str(bundle))])))


def database_url(*, refresh: bool = False, env: Env = os.environ) -> str:
    """The domain PostgreSQL URL (through RDS Proxy when DATABASE_PROXY_ENDPOINT
    is set). ``refresh`` re-reads the secret (after a rotation)."""
    url = url_from_secret(_read("DATABASE_URL", "DATABASE_URL_SECRET", "DATABASE_URL_PARAMETER", refresh, env),
                          "database", env)
    proxy = text(env, "DATABASE_PROXY_ENDPOINT")
    if proxy:
        url = with_host(url, proxy)
    return with_ca_bundle(url)


def store_url(*, refresh: bool = False, env: Env = os.environ) -> str:
    """The coordination store URL (postgresql://, redis://, rediss://, dynamodb://)."""
    raw = _read("ONCEONLY_STORE_URL", "ONCEONLY_STORE_URL_SECRET", "ONCEONLY_STORE_URL_PARAMETER", refresh, env)
    return with_ca_bundle(url_from_secret(raw, "store", env))
