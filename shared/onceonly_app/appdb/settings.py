"""Where the functions find their stores. Locally: plain env vars. On AWS: the
URL sits in Secrets Manager (or SSM) and is read through Powertools Parameters,
cached per warm container, never put in a plain env var."""

from __future__ import annotations

import os

from onceonly.errors import ConfigError

CACHE_SECONDS = 300


def _resolve(direct_var: str, secret_var: str, ssm_var: str) -> str:
    direct = os.environ.get(direct_var)
    if direct:
        return direct
    secret_name = os.environ.get(secret_var)
    if secret_name:
        from aws_lambda_powertools.utilities import parameters

        return str(parameters.get_secret(secret_name, max_age=CACHE_SECONDS))
    ssm_name = os.environ.get(ssm_var)
    if ssm_name:
        from aws_lambda_powertools.utilities import parameters

        return str(parameters.get_parameter(ssm_name, decrypt=True, max_age=CACHE_SECONDS))
    raise ConfigError(f"set {direct_var} (local), {secret_var} (a Secrets Manager name) or {ssm_var} (an SSM name)")


def database_url() -> str:
    """The domain PostgreSQL URL."""
    return _resolve("DATABASE_URL", "DATABASE_URL_SECRET", "DATABASE_URL_PARAMETER")


def store_url() -> str:
    """The coordination store URL (postgresql://, redis://, dynamodb://)."""
    return _resolve("ONCEONLY_STORE_URL", "ONCEONLY_STORE_URL_SECRET", "ONCEONLY_STORE_URL_PARAMETER")
