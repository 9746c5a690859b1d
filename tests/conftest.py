"""Real servers for the tests: PostgreSQL and Redis on 127.0.0.1 (or embedded
ones when they are not running), and dynalite for DynamoDB. A missing server
fails the tests with a message naming what to install; nothing is skipped."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

import onceonly
from onceonly_cli.testing.redis_cluster import LocalCluster
from onceonly_cli.testing.servers import DEFAULT_POSTGRES_URL, LocalServers, ServerSetupError
from tests.support import BACKENDS
from tests.support.servers.default_data import changes, fingerprint
from tests.support.servers.pgbouncer import PgBouncer, PgBouncerError
from tests.support.servers.scratch import delete_table, scratch_database, scratch_redis_prefix, with_prefix

# boto3 needs credentials and a region even for a local endpoint; never real ones.
os.environ.update(
    AWS_ACCESS_KEY_ID="testing",
    AWS_SECRET_ACCESS_KEY="testing",
    AWS_SESSION_TOKEN="testing",
    AWS_DEFAULT_REGION="us-east-1",
)
os.environ.pop("AWS_PROFILE", None)

# The app's fixtures, registered once for the whole session (pytest reads
# pytest_plugins in this file only).
pytest_plugins = (
    "tests.support.delivery.webhook_fixtures",
    "tests.support.delivery.subscription_fixtures",
    "tests.support.jobs.jobs_fixtures",
    "tests.support.jobs.fence_fixtures",
)

@pytest.fixture(scope="session", autouse=True)
def default_database_left_alone() -> Iterator[None]:
    """The session fails if the user's default database (what `onceonly status`
    shows without options) changed while it ran: tests write only to databases,
    key prefixes and tables of their own."""
    before = fingerprint()
    yield
    if before is not None:
        changed = changes(before, fingerprint() or {})
        if changed:
            pytest.fail(f"the test session changed the default database {DEFAULT_POSTGRES_URL}: "
                        + "; ".join(changed), pytrace=False)


@pytest.fixture(scope="session")
def local_servers() -> Iterator[LocalServers]:
    servers = LocalServers()
    yield servers
    servers.stop()


def _or_fail(start):  # type: ignore[no-untyped-def]
    try:
        return start()
    except ServerSetupError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def postgres_server_url(local_servers: LocalServers) -> str:
    """The PostgreSQL server the tests use (its default database is never written)."""
    return _or_fail(lambda: local_servers.postgres(os.environ.get("ONCEONLY_TEST_POSTGRES_URL")))


@pytest.fixture(scope="session")
def postgres_url(postgres_server_url: str) -> Iterator[str]:
    """A database of this test run's own, created on the test server and dropped
    at the end: the user's data (and `onceonly status`) never sees the tests'."""
    with scratch_database(postgres_server_url, "onceonly_test") as url:
        yield url


@pytest.fixture(scope="session")
def pgbouncer(postgres_server_url: str) -> Iterator[PgBouncer]:
    """A real PgBouncer in transaction mode with its default settings, in front
    of the test server, for the whole session."""
    try:
        bouncer = PgBouncer(postgres_server_url, "transaction").__enter__()
    except PgBouncerError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield bouncer
    bouncer.__exit__()


@pytest.fixture(scope="session")
def postgres_pgbouncer_url(postgres_server_url: str, pgbouncer: PgBouncer) -> Iterator[str]:
    """A database of this run's own (not ``postgres_url``'s: a store per
    backend) through the transaction-mode PgBouncer, declared as such
    (``pool_mode=transaction``)."""
    with scratch_database(postgres_server_url, "onceonly_test_pgbouncer") as url:
        yield pgbouncer.url(url, pool_mode="transaction")


@pytest.fixture(scope="session")
def redis_server_url(local_servers: LocalServers) -> str:
    """The test Redis server, for raw redis-py clients (no ``prefix`` option)."""
    return _or_fail(lambda: local_servers.redis(os.environ.get("ONCEONLY_TEST_REDIS_URL")))


@pytest.fixture(scope="session")
def redis_url(redis_server_url: str) -> Iterator[str]:
    """A store URL on the test Redis with a key prefix of this run's own, deleted at the end."""
    with scratch_redis_prefix(redis_server_url, "onceonly-test") as url:
        yield url


@pytest.fixture(scope="session")
def redis_cluster(local_servers: LocalServers) -> LocalCluster:
    """A Redis Cluster of this session's own (3 primaries, 3 replicas, loopback),
    stopped by PID with the other servers. Tests that kill nodes or move slots
    start their own (tests/support/servers/redis_cluster_ops.py)."""
    return _or_fail(local_servers.redis_cluster)


@pytest.fixture(scope="session")
def redis_cluster_url(redis_cluster: LocalCluster) -> str:
    """A store URL on the session's cluster (``?cluster=1``), a key prefix of its own."""
    return with_prefix(redis_cluster.url, f"onceonly-test-{secrets.token_hex(4)}")


@pytest.fixture(scope="session")
def dynalite_endpoint(local_servers: LocalServers) -> Iterator[str]:
    """The session's dynalite; every table a test creates on it must be gone at the end."""
    endpoint = _or_fail(local_servers.dynalite)
    yield endpoint
    import boto3

    left = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=endpoint).list_tables()["TableNames"]
    if left:
        pytest.fail(f"tests left DynamoDB tables behind: {', '.join(left)}", pytrace=False)


@pytest.fixture(scope="session")
def dynamodb_url(dynalite_endpoint: str) -> Iterator[str]:
    """A table of this run's own on the session's dynalite, deleted at the end."""
    url = f"dynamodb://onceonly-test-{secrets.token_hex(4)}?region=us-east-1&endpoint_url={dynalite_endpoint}"
    yield url
    delete_table(url)


@pytest.fixture(scope="session")
def moto_endpoint(local_servers: LocalServers) -> str:
    """One moto server (SES, SQS) on 127.0.0.1 for the whole session: every
    process of a test reaches the same state through it (AWS_ENDPOINT_URL_*)."""
    return str(local_servers.moto())


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_url"))


@pytest.fixture
def store(store_url: str) -> Iterator[onceonly.Store]:
    s = onceonly.connect(store_url)
    s.setup()
    yield s
    s.close()


@pytest.fixture
def unique() -> str:
    """A fresh name per test, so tests never share lease names or queues."""
    return f"t-{secrets.token_hex(6)}"


# Under pytest-xdist (`-n 2 --dist loadgroup`, scripts/test), the tests marked
# `processes` (eight-process races, simulate runs) share one worker: two of them
# at once would only slow each other down. Those marked `sam_build` share one
# too: `sam build` keeps its cached dependencies in the repo's .aws-sam/deps
# (samconfig.toml: cached = true), and building the library's wheel writes
# build/ in the source tree, so two at once clobber each other's.
# Tests marked `timing` (real-time bounds) join the processes' worker, so
# that they never run beside one of those runs.
XDIST_GROUPS = {"processes": "processes", "timing": "processes", "sam_build": "sam-build"}


# tryfirst: xdist's own hook reads the groups to name the items, so they must be set before it runs.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for marker, group in XDIST_GROUPS.items():
            if item.get_closest_marker(marker):
                item.add_marker(pytest.mark.xdist_group(group))
                break
