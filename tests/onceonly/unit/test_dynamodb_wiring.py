"""AWS wiring of the DynamoDB store: table creation, configuration, error
translation. moto is not atomic (two racing conditional writes can both succeed), so nothing here proves
exactly-once; the contract suite runs the semantics on dynalite."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError
from botocore.stub import Stubber
from moto import mock_aws

import onceonly
from onceonly.dynamodb import MAX_CONCURRENT_WRITES, TTL_ATTRIBUTE, DynamoDBStore
from tests.support import REPO_ROOT

TABLE = "onceonly-unit"
TEMPLATE = REPO_ROOT / "template.yaml"


@pytest.fixture
def client() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("dynamodb", region_name="us-east-1")


@pytest.fixture
def store(client: Any) -> DynamoDBStore:
    store = DynamoDBStore(client, TABLE)
    store.setup()
    return store


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _template_table() -> dict[str, Any]:
    class TemplateLoader(yaml.SafeLoader):
        """Reads CloudFormation's !Ref/!Sub/... tags as plain values."""

    def any_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
        if isinstance(node, yaml.ScalarNode):
            return loader.construct_scalar(node)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node)
        return loader.construct_mapping(node)  # type: ignore[arg-type]

    TemplateLoader.add_multi_constructor("!", any_tag)
    template = yaml.load(TEMPLATE.read_text(encoding="utf-8"), Loader=TemplateLoader)
    properties: dict[str, Any] = template["Resources"]["CoordinationTable"]["Properties"]
    return properties


# -- setup -------------------------------------------------------------------
def test_setup_creates_the_table_of_the_template(client: Any) -> None:
    DynamoDBStore(client, TABLE).setup()
    table = client.describe_table(TableName=TABLE)["Table"]
    expected = _template_table()
    assert table["TableStatus"] == "ACTIVE"
    assert table["BillingModeSummary"]["BillingMode"] == expected["BillingMode"] == "PAY_PER_REQUEST"
    assert sorted(table["AttributeDefinitions"], key=str) == sorted(expected["AttributeDefinitions"], key=str)
    assert table["KeySchema"] == expected["KeySchema"] == [{"AttributeName": "pk", "KeyType": "HASH"}]
    (index,) = table["GlobalSecondaryIndexes"]
    (expected_index,) = expected["GlobalSecondaryIndexes"]
    assert index["IndexName"] == expected_index["IndexName"] == "due"
    assert index["KeySchema"] == expected_index["KeySchema"]
    assert index["Projection"] == expected_index["Projection"] == {"ProjectionType": "ALL"}


def test_setup_is_idempotent(client: Any) -> None:
    store = DynamoDBStore(client, TABLE)
    store.setup()
    store.setup()
    DynamoDBStore(client, TABLE).setup()
    assert client.list_tables()["TableNames"] == [TABLE]


def test_setup_turns_on_ttl_by_the_attribute_the_template_names(client: Any) -> None:
    DynamoDBStore(client, TABLE).setup()
    described = client.describe_time_to_live(TableName=TABLE)["TimeToLiveDescription"]
    assert described == {"TimeToLiveStatus": "ENABLED", "AttributeName": TTL_ATTRIBUTE}
    assert _template_table()["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTRIBUTE, "Enabled": True}
    DynamoDBStore(client, TABLE).setup()  # already on: no second UpdateTimeToLive (it would be refused)


class _NoTtlApi:
    """A server without the TTL API, as dynalite answers it."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def update_time_to_live(self, **kwargs: Any) -> Any:
        raise ClientError({"Error": {"Code": "UnknownOperationException", "Message": ""}}, "UpdateTimeToLive")


class _NoTtlPermission(_NoTtlApi):
    """A role allowed to describe the table, not its TTL (a narrow deploy role)."""

    def describe_time_to_live(self, **kwargs: Any) -> Any:
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "not authorized"}},
                          "DescribeTimeToLive")


@pytest.mark.parametrize("wrap", [_NoTtlApi, _NoTtlPermission], ids=["no-ttl-api", "no-ttl-permission"])
def test_setup_works_without_ttl(client: Any, wrap: Any) -> None:
    store = DynamoDBStore(wrap(client), TABLE)
    store.setup()
    lease = store.acquire("tick:job:2026-01-01T00:00:00Z", ttl=30)
    assert lease is not None and store.complete(lease, keep=60, expire=True)


def test_only_expiring_completions_write_the_ttl_attribute(store: DynamoDBStore, client: Any) -> None:
    tick, poller = store.acquire("tick:job:2026-01-01T00:00:00Z", ttl=30), store.acquire("poller:job", ttl=30)
    assert tick is not None and poller is not None
    before = time.time()
    assert store.complete(tick, keep=120, expire=True) and store.complete(poller, keep=120)
    items = {name: client.get_item(TableName=TABLE, Key={"pk": {"S": f"lease#{name}"}})["Item"]
             for name in (tick.name, poller.name)}
    assert before + 120 <= int(items[tick.name][TTL_ATTRIBUTE]["N"]) <= time.time() + 121
    assert TTL_ATTRIBUTE not in items[poller.name]


class _LosesTheCreateRace:
    """A client on which another process creates the table just before ours."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.create_calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def create_table(self, **kwargs: Any) -> Any:
        self.create_calls += 1
        self._client.create_table(**kwargs)
        error = {"Error": {"Code": "ResourceInUseException", "Message": f"Table already exists: {TABLE}"}}
        raise ClientError(error, "CreateTable")


def test_setup_tolerates_a_concurrent_create(client: Any) -> None:
    racing = _LosesTheCreateRace(client)
    DynamoDBStore(racing, TABLE).setup()
    assert racing.create_calls == 1
    assert client.describe_table(TableName=TABLE)["Table"]["TableStatus"] == "ACTIVE"


def test_setup_refuses_a_table_without_the_due_index(client: Any) -> None:
    client.create_table(
        TableName=TABLE,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
    )
    with pytest.raises(onceonly.StoreNotReadyError, match=f"{TABLE}.*'due'"):
        DynamoDBStore(client, TABLE).setup()


# -- missing table / unreachable endpoint -------------------------------------
@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.acquire("job", ttl=5),
        lambda s: s.inspect("job"),
        lambda s: s.queue("q").put("a"),
        lambda s: s.queue("q").claim(limit=5, lease=5),
        lambda s: s.queue("q").depth(),
    ],
    ids=["acquire", "inspect", "put", "claim", "depth"],
)
def test_missing_table_is_not_ready_and_named(client: Any, call: Any) -> None:
    store = DynamoDBStore(client, "no-such-table")
    with pytest.raises(onceonly.StoreNotReadyError, match=r"'no-such-table'.*store\.setup\(\)") as caught:
        call(store)
    assert isinstance(caught.value.__cause__, ClientError)


def test_unreachable_endpoint_is_unavailable() -> None:
    store = onceonly.connect(
        f"dynamodb://{TABLE}?region=us-east-1&endpoint_url=http://127.0.0.1:{_closed_port()}"
    )
    with pytest.raises(onceonly.StoreUnavailableError, match="unreachable") as caught:
        store.acquire("job", ttl=5)
    assert isinstance(caught.value.__cause__, EndpointConnectionError)
    with pytest.raises(onceonly.StoreUnavailableError):
        store.setup()
    store.close()


def _stubbed_store() -> tuple[DynamoDBStore, Stubber]:
    client = boto3.client("dynamodb", region_name="us-east-1", config=Config(retries={"max_attempts": 1}))
    return DynamoDBStore(client, TABLE), Stubber(client)


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("InternalServerError", "try again"),
        ("ValidationException", "Item size has exceeded the maximum allowed size"),
        ("AccessDeniedException", "not authorized to perform dynamodb:UpdateItem"),
    ],
)
def test_other_client_errors_are_unavailable(code: str, message: str) -> None:
    store, stubber = _stubbed_store()
    stubber.add_client_error("update_item", service_error_code=code, service_message=message)
    with stubber, pytest.raises(onceonly.StoreUnavailableError, match=code) as caught:
        store.acquire("job", ttl=5)
    assert isinstance(caught.value.__cause__, ClientError)


def test_missing_index_at_claim_time_is_not_ready() -> None:
    store, stubber = _stubbed_store()
    stubber.add_client_error(
        "query", service_error_code="ValidationException",
        service_message="The table does not have the specified index: due",
    )
    with stubber, pytest.raises(onceonly.StoreNotReadyError, match="setup"):
        store.queue("q").claim(limit=1, lease=5)


def test_contention_is_none_not_an_error() -> None:
    store, stubber = _stubbed_store()
    stubber.add_client_error("update_item", service_error_code="ConditionalCheckFailedException")
    with stubber:
        assert store.acquire("job", ttl=5) is None


# -- a cancelled transaction -----------------------------------------------------
def _held_claim(item_id: str) -> onceonly.Claim:
    return onceonly.Claim(queue="q", item_id=item_id, payload=None, token=1, attempt=1, owner="owner-1",
                          lease_expires_at=time.time() + 60)


@pytest.mark.parametrize("held", [True, False], ids=["still-held", "stale"])
def test_a_transaction_cancelled_without_reasons_counts_as_not_applied(held: bool) -> None:
    """Real DynamoDB sends one cancellation reason per write; a compatible
    server or proxy may send none. Then nothing was applied: the ack is sent on
    its own, and its own answer is the result."""
    store, stubber = _stubbed_store()
    stubber.add_client_error("transact_write_items", service_error_code="TransactionCanceledException",
                             service_message="Transaction cancelled, please refer cancellation reasons")
    if held:
        stubber.add_response("delete_item", {})
    else:
        stubber.add_client_error("delete_item", service_error_code="ConditionalCheckFailedException")
    with stubber:
        assert store.queue("q").ack_many([_held_claim("item-1")]) == [held]
    stubber.assert_no_pending_responses()


# -- configuration ------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "named"),
    [
        (f"dynamodb://{TABLE}?regoin=us-east-1", "regoin"),
        (f"dynamodb://{TABLE}?region=us-east-1&shards=abc", "shards"),
        (f"dynamodb://{TABLE}?region=us-east-1&shards=0", "shards"),
        (f"dynamodb://{TABLE}?region=us-east-1&shards=-1", "shards"),
        (f"dynamodb://{TABLE}?region=us-east-1&shards=1.5", "shards"),
        (f"dynamodb://{TABLE}?region=us-east-1&shards=1000", "shards"),
        (f"dynamodb://{TABLE}?region=us-east-1&endpoint_url=ftp://127.0.0.1", "endpoint_url"),
        (f"dynamodb://{TABLE}?region=", "region"),
        ("dynamodb://ab?region=us-east-1", "table"),
        ("dynamodb://bad*name?region=us-east-1", "table"),
    ],
)
def test_bad_url_is_a_config_error_naming_the_option(url: str, named: str) -> None:
    with pytest.raises(onceonly.ConfigError, match=named):
        onceonly.connect(url)


@pytest.mark.parametrize("shards", [0, 65, True, 2.0, None])
def test_bad_shards_in_the_constructor(client: Any, shards: Any) -> None:
    with pytest.raises(onceonly.ConfigError, match="shards"):
        DynamoDBStore(client, TABLE, shards=shards)


def test_no_region_is_a_config_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for variable in ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    with pytest.raises(onceonly.ConfigError, match="region"):
        onceonly.connect(f"dynamodb://{TABLE}")


def test_url_builds_a_bounded_client() -> None:
    store = onceonly.connect(f"dynamodb://{TABLE}?region=eu-west-1&endpoint_url=http://127.0.0.1:9&shards=3")
    assert isinstance(store, DynamoDBStore)
    assert (store.kind, store.table, store.shards) == ("dynamodb", TABLE, 3)
    meta = store._client.meta
    assert (meta.region_name, meta.endpoint_url) == ("eu-west-1", "http://127.0.0.1:9")
    assert meta.config.connect_timeout <= 5 and meta.config.read_timeout <= 10
    assert meta.config.retries["mode"] == "standard"
    assert meta.config.max_pool_connections >= MAX_CONCURRENT_WRITES
    store.close()


def test_boto3_is_imported_only_for_dynamodb_urls() -> None:
    probe = (
        "import sys, onceonly\n"
        "assert 'boto3' not in sys.modules, 'import onceonly pulled in boto3'\n"
        "onceonly.connect('dynamodb://some-table?region=us-east-1')\n"
        "assert 'boto3' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=60)


# -- expressions are accepted by a second implementation ------------------------
def test_items_are_written_as_documented(store: DynamoDBStore, client: Any) -> None:
    store.queue("jobs").put("item-1", due_at=1000.5, payload={"a": 1})
    item = client.get_item(TableName=TABLE, Key={"pk": {"S": "q#jobs#item-1"}})["Item"]
    assert item == {
        "pk": {"S": "q#jobs#item-1"},
        "queue": {"S": "jobs"},
        "item_id": {"S": "item-1"},
        "payload": {"S": '{"a":1}'},
        "claimable_at": {"N": "1000.500"},
        "qshard": {"S": f"jobs#{zlib.crc32(b'item-1') % 8}"},
        "token": {"N": "0"},
        "attempt": {"N": "0"},
    }
    lease = store.acquire("nightly", ttl=30)
    assert lease is not None
    record = client.get_item(TableName=TABLE, Key={"pk": {"S": "lease#nightly"}})["Item"]
    assert set(record) == {"pk", "owner", "token", "busy_until", "completed"}


def test_queue_names_with_separators_do_not_collide(store: DynamoDBStore) -> None:
    store.queue("a#b").put("c", payload="first")
    store.queue("a").put("b#c", payload="second")
    assert [c.payload for c in store.queue("a#b").claim(limit=5, lease=30)] == ["first"]
    assert [c.payload for c in store.queue("a").claim(limit=5, lease=30)] == ["second"]


def test_every_operation_is_accepted_by_moto(store: DynamoDBStore) -> None:
    """Single-threaded walk through every expression: reserved words (owner,
    token, queue...) must all be aliased, or moto rejects the call."""
    lease = store.acquire("job", ttl=30)
    assert lease is not None and store.renew(lease, ttl=30).token == lease.token
    assert store.complete(lease, keep=60) is True
    state = store.inspect("job")
    assert state is not None and state.completed
    q = store.queue("work")
    q.put("x", payload=[1])
    q.put("y", due_at=4_000_000_000.0)
    (claim,) = q.claim(limit=5, lease=30)
    assert q.depth() == onceonly.QueueDepth(due=0, scheduled=1, in_flight=1)
    assert q.retry(claim, due_at=1.0) is True
    (again,) = q.claim(limit=5, lease=30)
    assert q.ack_many([again, claim]) == [True, False]
    assert q.cancel("y") is True and q.depth().total == 0
    store.close()


# -- a full semaphore seen in the failed write (DynamoDB's ALL_OLD on a failed condition) --
def _full_semaphore(expires_at: float) -> dict[str, Any]:
    return {"pk": {"S": "sem#endpoint"}, "n": {"N": "1"}, "h_0123456789abcdef": {"N": f"{expires_at:.3f}"}}


def test_a_refused_take_reads_nothing_when_the_failed_write_returns_the_item() -> None:
    """Where the server returns the item with a failed condition (DynamoDB does,
    dynalite does not), a refused take is one request: no GetItem (the stubber
    has none queued, so one would fail the call)."""
    store, stubber = _stubbed_store()
    stubber.add_client_error("update_item", service_error_code="ConditionalCheckFailedException",
                             modeled_fields={"Item": _full_semaphore(time.time() + 60)})
    with stubber:
        assert store.take_permit("endpoint", 1, ttl=30) is None
        stubber.assert_no_pending_responses()


def test_an_evicting_take_uses_the_item_the_failed_write_returned() -> None:
    store, stubber = _stubbed_store()
    stubber.add_client_error("update_item", service_error_code="ConditionalCheckFailedException",
                             modeled_fields={"Item": _full_semaphore(time.time() - 1)})
    stubber.add_response("update_item", {})  # the eviction write
    with stubber:
        assert store.take_permit("endpoint", 1, ttl=30) is not None
        stubber.assert_no_pending_responses()
