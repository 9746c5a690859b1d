"""Helpers of the scheduled-job suites: a test's scope (tenant, job name, child
environment) and readers of what moto's SES and SQS received."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

import boto3

from tests.support.jobs.jobs_workers import Invocation

MOTO_ACCOUNT = "123456789012"
REGION = "us-east-1"


def aws_client(service: str, endpoint: str) -> Any:
    return boto3.client(service, region_name=REGION, endpoint_url=endpoint)


@dataclass(frozen=True)
class JobScope:
    """One test's slice of the shared world: its tenant, its job name (the tick
    locks and the payment cursor are keyed by it) and the child environment,
    which carries both (BILLING_TENANT, BILLING_JOB_NAME: the handler reads
    them at cold start, like every other setting)."""

    tenant: str
    job: str
    env: dict[str, str]

    def with_env(self, **extra: str) -> dict[str, str]:
        return {**self.env, **extra}

    def invocation(self, function: str, event: dict[str, Any], **extra_env: str) -> Invocation:
        """``function``'s handler on ``event``, in this scope, with ``extra_env`` set."""
        return Invocation(function, self.with_env(**extra_env), event)


def make_scope(db_url: str, store_url: str, moto_endpoint: str, sender: str, unique: str) -> JobScope:
    tenant = f"tenant-{unique}"
    job = f"job-{unique}"
    env = {
        "BILLING_TENANT": tenant,
        "BILLING_JOB_NAME": job,
        "DATABASE_URL": db_url,
        "ONCEONLY_STORE_URL": store_url,
        "TICK_LEASE_SECONDS": "60",
        "POLLER_LEASE_SECONDS": "60",
        "SES_FROM_ADDRESS": sender,
        "AWS_ENDPOINT_URL_SES": moto_endpoint,
        "AWS_ENDPOINT_URL_SQS": moto_endpoint,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "POWERTOOLS_METRICS_NAMESPACE": "onceonly",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }
    return JobScope(tenant=tenant, job=job, env=env)


def payments_env(fake: Any, queue_url: str) -> dict[str, str]:
    """The payment watcher's settings for a fake payments API (FakePayments):
    its URL, and its issuer's USD as the one accepted asset."""
    return {"PAYMENTS_API_URL": fake.url, "WEBHOOK_QUEUE_URL": queue_url,
            "PAYMENTS_ACCEPTED_ASSETS": f"USD=USD:{fake.issuer}"}


def sent_emails(recipient_suffix: str) -> list[Any]:
    """SES messages moto accepted for recipients ending in ``recipient_suffix``
    (the moto server runs in this process, so its backend is readable here)."""
    from moto.ses.models import ses_backends

    backend = ses_backends[MOTO_ACCOUNT][REGION]
    return [m for m in backend.sent_messages
            if any(a.endswith(recipient_suffix) for a in m.destinations.get("ToAddresses", []))]


def drain_queue(moto_endpoint: str, queue_url: str) -> list[dict[str, Any]]:
    """The bodies of every message in the queue, read from moto's backend (the
    server runs in this process; receiving hundreds of messages through the API
    takes seconds). The queue keeps them: tests use a fresh queue each."""
    from moto.sqs.models import sqs_backends

    queue = sqs_backends[MOTO_ACCOUNT][REGION].queues[queue_url.rsplit("/", 1)[-1]]
    return [json.loads(message.body) for message in queue._messages]


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(6)}"
