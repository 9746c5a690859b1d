"""Fixtures of the scheduled-job suites, loaded with ``pytest_plugins``: the
migrated domain database, one moto server (SES, SQS) shared by every process
of the session, a verified SES sender, a per-test SQS queue and fake payments
API, and the environment a job's handler needs in a child process."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

import onceonly
from appdb.migrate import migrate
from onceonly_cli.fake_payments import FakePayments
from onceonly_cli.servers import free_port

from .jobs_workers import Replicas

SES_SENDER = "billing@onceonly.test"
MOTO_ACCOUNT = "123456789012"
REGION = "us-east-1"


@pytest.fixture(scope="session")
def jobs_db(postgres_url: str) -> str:
    """The domain database with the migrations applied. Its tables are shared
    with other tests: each test uses its own tenant and job names and counts
    only its own rows."""
    migrate(postgres_url)
    return postgres_url


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer  # needs moto[server] (flask)

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


def aws_client(service: str, endpoint: str) -> Any:
    return boto3.client(service, region_name=REGION, endpoint_url=endpoint)


@pytest.fixture(scope="session")
def ses_sender(moto_endpoint: str) -> str:
    aws_client("ses", moto_endpoint).verify_email_identity(EmailAddress=SES_SENDER)
    return SES_SENDER


@pytest.fixture
def sqs_queue(moto_endpoint: str, unique: str) -> str:
    return str(aws_client("sqs", moto_endpoint).create_queue(QueueName=f"webhooks-{unique}")["QueueUrl"])


@pytest.fixture
def fake_payments() -> Iterator[FakePayments]:
    with FakePayments() as fake:
        yield fake


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[Replicas]:
    group = Replicas(tmp_path / "replicas")
    yield group
    group.stop_all()


@dataclass(frozen=True)
class JobScope:
    """One test's slice of the shared world: its tenant, its job name (the tick
    locks and the payment cursor are keyed by it) and the child environment."""

    tenant: str
    job: str
    env: dict[str, str]

    def with_env(self, **extra: str) -> dict[str, str]:
        return {**self.env, **extra}


@pytest.fixture
def job_scope(jobs_db: str, store_url: str, store: onceonly.Store, moto_endpoint: str, ses_sender: str,
              unique: str) -> JobScope:
    """A scope on the parametrised coordination store (``store`` has run setup)."""
    return make_scope(jobs_db, store_url, moto_endpoint, ses_sender, unique)


def make_scope(db_url: str, store_url: str, moto_endpoint: str, sender: str, unique: str) -> JobScope:
    tenant = f"tenant-{unique}"
    job = f"job-{unique}"
    env = {
        "DATABASE_URL": db_url,
        "ONCEONLY_STORE_URL": store_url,
        "JOB_NAME": job,
        "BILLING_TENANT_SCOPE": tenant,
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


def sent_emails(recipient_suffix: str) -> list[Any]:
    """SES messages moto accepted for recipients ending in ``recipient_suffix``
    (the moto server runs in this process, so its backend is readable here)."""
    from moto.ses.models import ses_backends

    backend = ses_backends[MOTO_ACCOUNT][REGION]
    return [m for m in backend.sent_messages
            if any(a.endswith(recipient_suffix) for a in m.destinations.get("ToAddresses", []))]


def drain_queue(moto_endpoint: str, queue_url: str) -> list[dict[str, Any]]:
    """Every message in the queue, received once (kept invisible for the test)."""
    import json

    sqs = aws_client("sqs", moto_endpoint)
    bodies: list[dict[str, Any]] = []
    while True:
        batch = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=600,
                                    WaitTimeSeconds=0).get("Messages", [])
        if not batch:
            return bodies
        bodies.extend(json.loads(m["Body"]) for m in batch)


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(6)}"
