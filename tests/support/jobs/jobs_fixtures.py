"""Fixtures of the scheduled-job suites, loaded with ``pytest_plugins``: the
migrated domain database, one moto server (SES, SQS) shared by every process
of the session, a verified SES sender, a per-test SQS queue and fake payments
API, and the environment a job's handler needs in a child process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg_pool import ConnectionPool

import onceonly
from onceonly_app.db.migrate import migrate
from onceonly_cli.testing.fake_payments import FakePayments
from tests.support.jobs.jobs_helpers import JobScope, aws_client, make_scope
from tests.support.jobs.jobs_workers import Replicas

SES_SENDER = "billing@onceonly.test"


@pytest.fixture(scope="session")
def jobs_db(postgres_url: str) -> str:
    """The domain database with the migrations applied. Its tables are shared
    with other tests: each test uses its own tenant and job names and counts
    only its own rows."""
    migrate(postgres_url)
    return postgres_url


@pytest.fixture
def pool(jobs_db: str) -> Iterator[ConnectionPool]:
    with ConnectionPool(jobs_db, min_size=0, max_size=2, open=True) as p:
        yield p


@pytest.fixture
def pg_store(postgres_url: str) -> Iterator[onceonly.Store]:
    """A PostgreSQL coordination store, for tests that need only one."""
    store = onceonly.connect(postgres_url)
    store.setup()
    yield store
    store.close()


@pytest.fixture
def ses_sender(moto_endpoint: str) -> str:
    """The verified SES sender, verified again for every test: a unit test's
    mock_aws() resets moto's state, which the session's in-process moto server
    shares, and would take a once-verified sender with it."""
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


@pytest.fixture
def job_scope(jobs_db: str, store_url: str, store: onceonly.Store, moto_endpoint: str, ses_sender: str,
              unique: str) -> JobScope:
    """A scope on the parametrised coordination store (``store`` has run setup)."""
    return make_scope(jobs_db, store_url, moto_endpoint, ses_sender, unique)


