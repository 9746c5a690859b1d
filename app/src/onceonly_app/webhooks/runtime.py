"""The service as a Lambda container builds it: once, on first use, from the
shared clients (onceonly_app.db.clients) and the WEBHOOK_* settings, read
through the one reader (WebhookConfig.from_env)."""

from __future__ import annotations

import logging
import time
from functools import cache
from typing import Any

from psycopg_pool import ConnectionPool

from onceonly_app.db import clients
from onceonly_app.db.clients import coordination_store, db_pool

from .config import WebhookConfig
from .endpoint_health import EndpointHealth
from .endpoint_limits import EndpointGate, PermitReturns
from .sender import WebhookSender
from .service import WebhookService


@cache
def _parts() -> tuple[WebhookConfig, ConnectionPool[Any], WebhookSender]:
    config = WebhookConfig.from_env()
    sender = WebhookSender(config.connect_timeout, config.read_timeout, config.ca_bundle,
                           config.attempt_budget)
    return config, db_pool(), sender


def webhook_service(logger: logging.Logger | Any | None = None) -> WebhookService:
    """The per-container service, logging through the handler's ``logger``."""
    config, pool, sender = _parts()
    store = coordination_store()
    # A slot outlives the request it admits: the attempt's whole budget and the margin.
    gate = EndpointGate(store, pool, config.attempt_budget + config.deadline_margin, log=logger,
                        returns=_permit_returns())
    queue = store.queue(config.queue_name)
    health = EndpointHealth(pool, queue, period=config.auto_disable_after, lease=config.attempt_lease,
                            clock=time.time, log=logger or logging.getLogger(__name__))
    return WebhookService(pool, queue, sender, config, logger=logger, gate=gate, health=health)


@cache
def _permit_returns() -> PermitReturns:
    """One returns thread per container, not one per invocation's service."""
    return PermitReturns(coordination_store())


@cache
def dispatch_queue() -> tuple[Any, str] | None:
    """The dispatcher's own SQS queue (client, URL), to back off records a store
    outage stopped; None where WEBHOOK_QUEUE_URL is not set (local runs)."""
    url = _parts()[0].queue_url
    if not url:
        return None
    import boto3  # only the outage path pays for the import

    return boto3.client("sqs"), url


def reset() -> None:
    """Forget this process's clients (tests and the local CLI switch stores)."""
    _parts.cache_clear()
    _permit_returns.cache_clear()
    dispatch_queue.cache_clear()
    clients.reset()
