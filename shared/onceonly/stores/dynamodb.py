"""DynamoDB store: leases and due queues in one table, every grant ONE conditional
write. DynamoDB serialises writes to an item, so a condition checked and a value
set in the same UpdateItem cannot be interleaved by another writer.

Table (template.yaml's CoordinationTable; :meth:`DynamoDBStore.setup` creates it):
hash key ``pk`` (S), GSI ``due`` on ``qshard`` (S) + ``claimable_at`` (N),
projection ALL, PAY_PER_REQUEST.

- A lease is the item ``lease#NAME``: owner, token, busy_until, completed.
  Records are kept, so the token strictly increases across grants. Only a record
  completed with ``expire=True`` (one cron tick) carries ``expire_at``, the
  table's TTL attribute (epoch seconds, the end of its keep); DynamoDB deletes
  it some time after that, and a grant removes the attribute again.
- A queue item is ``q#QUEUE#ITEM_ID`` with ONE "claimable at" time, the sort key
  of the ``due`` GSI: its due time while waiting, its lease expiry while in flight.
  A crashed holder's item is claimable again once its lease runs out. The GSI's
  hash key ``qshard`` = ``QUEUE#k`` (k = crc32(item_id) % shards) spreads a busy
  queue over partitions; claim walks the shards from a random one.

Assumptions worth knowing:

- Clock. DynamoDB has no server clock, so times come from the client
  (``time.time()``, or the constructor's ``clock``). Two invocations agree on
  "now" only up to their clock skew, so leases must be much longer than that
  skew (docs/reliability.md measures the margin). Lambda hosts are NTP-synced,
  typically well under a second apart; a lease of seconds to minutes is safe.
  Fencing does not depend on clocks: every write checks owner AND token.
- Eventual consistency. GSI queries are eventually consistent: an item just put
  may take a moment to become claimable, and one just claimed may still be
  listed (its conditional claim write then fails, and it is skipped).
  depth() is an estimate for the same reason.
- Shards. Every process using a queue must use the same ``shards``: items in
  shards a reader does not walk are never claimed by it.
- Retries. botocore retries a request that timed out or failed (at most once,
  sized to the URL's ``timeout``). A conditional write whose condition fails on
  such a retry raises StoreUnavailableError instead of reporting contention:
  the first attempt may have been applied and its reply lost, so the grant may
  exist, held by nobody, until its lease runs out. Nothing is granted twice.
- One deadline per call. A call of many requests (claim, put_many, ack_many,
  depth) ends within the store's ``timeout`` as a whole: each request waits no
  longer than the time left, nothing is sent after the deadline, and the error
  says how many requests may have been applied (docs/coordination.md,
  "DynamoDB: one deadline per call").
"""

from __future__ import annotations

import json
import logging
import math
import random
import re
import secrets
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, TypeVar
from urllib.parse import quote, urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoRegionError,
    ReadTimeoutError,
)

from ..api import Claim, ClaimBatch, Lease, LeaseState, QueueDepth
from ..errors import ConfigError, LeaseLostError, OnceOnlyError, StoreNotReadyError, StoreUnavailableError
from . import _common as common
from .timeouts import DEFAULT_TIMEOUT, TIMEOUT_OPTION, dynamodb_budget, timeout_from

log = logging.getLogger(__name__)

DEFAULT_SHARDS = 8
MAX_SHARDS = 64  # claim and depth walk every shard: more would cost too many queries
URL_OPTIONS = ("region", "endpoint_url", "shards", TIMEOUT_OPTION)
INDEX_NAME = "due"
TTL_ATTRIBUTE = "expire_at"  # template.yaml's TimeToLiveSpecification names the same
TTL_ON = ("ENABLED", "ENABLING")
# Conditional claim/ack writes issued at once; the HTTP pool is sized above it.
MAX_CONCURRENT_WRITES = 16
# TransactWriteItems takes at most 100 writes, on distinct items, of at most
# 4 MB together; 100 payloads at the 256 KiB limit would be 25 MB. Sized by the
# request's JSON, with a margin for how DynamoDB counts.
MAX_TRANSACTION_ITEMS = 100
MAX_TRANSACTION_BYTES = 3_000_000
# A cancelled transaction is sent again once without the writes whose
# condition failed; writes still refused after that are sent one by one.
TRANSACTION_ROUNDS = 2
CONDITION_FAILED = "ConditionalCheckFailed"
_TRANSACTION_OPERATIONS = {"update_item": "Update", "delete_item": "Delete"}
TABLE_NAME = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")
LEASE_PREFIX = "lease#"
QUEUE_PREFIX = "q#"

# -- lease expressions -------------------------------------------------------
# acquire: grant the name if it was never granted or its time ran out (expired,
# released, or completed and kept long enough). Closes the check-then-set race:
# the check and the takeover are one conditional write. The token survives in
# the record (if_not_exists starts it at 0), so it strictly increases.
LEASE_IS_FREE = "attribute_not_exists(#pk) OR #busy_until <= :now"
# A grant also removes expire_at: TTL deletion runs up to days late, and must
# never take the record of a name that was granted again after its keep.
GRANT_LEASE = (
    "SET #owner = :owner, #token = if_not_exists(#token, :zero) + :one,"
    " #busy_until = :until, #completed = :false REMOVE #expire_at"
)
# renew/release/complete: only the current grant may write. A stale holder
# (expired and re-granted: another token) or a released one (owner cleared) or
# a completed one is refused, so it cannot extend or end someone else's lease.
LEASE_IS_HELD_BY_CALLER = "#owner = :owner AND #token = :token AND #completed = :false"
EXTEND_LEASE = "SET #busy_until = :until"
RELEASE_LEASE = "SET #busy_until = :now REMOVE #owner"
COMPLETE_LEASE = "SET #busy_until = :until, #completed = :true"
# complete(expire=True): the same, plus the TTL attribute at the end of keep
# (rounded up: DynamoDB TTL takes whole epoch seconds).
COMPLETE_EXPIRING_LEASE = "SET #busy_until = :until, #completed = :true, #expire_at = :expire_at"

# -- queue expressions -------------------------------------------------------
# put: unconditional upsert. Removing the owner takes an in-flight item from its
# holder, whose ack/retry are then refused; token and attempt survive.
PUT_ITEM = (
    "SET #payload = :payload, #claimable_at = :due, #qshard = :qshard, #queue = :queue,"
    " #item_id = :item_id, #token = if_not_exists(#token, :zero),"
    " #attempt = if_not_exists(#attempt, :zero) REMOVE #owner"
)
DUE_IN_SHARD = "#qshard = :qshard AND #claimable_at <= :now"
NOT_DUE_IN_SHARD = "#qshard = :qshard AND #claimable_at > :now"
HAS_OWNER = "attribute_exists(#owner)"
# claim: the GSI listing may be stale and other claimers read the same listing.
# This condition makes concurrent claimers disjoint: the first write moves
# claimable_at to now + lease, so every later write on that item fails it.
# attribute_exists stops a claim from recreating an item acked or cancelled
# since the listing.
ITEM_IS_CLAIMABLE = "attribute_exists(#pk) AND #claimable_at <= :now"
GRANT_ITEM = (
    "SET #token = #token + :one, #attempt = #attempt + :one,"
    " #owner = :owner, #claimable_at = :until"
)
# ack/retry: only the current grant may finish the item. A re-granted item has
# a higher token; a rescheduled (put) or retried one has no owner.
ITEM_IS_HELD_BY_CALLER = "#token = :token AND #owner = :owner"
RESCHEDULE_ITEM = "SET #claimable_at = :due REMOVE #owner"

_ALIAS = re.compile(r"#(\w+)")
_T = TypeVar("_T")
_A = TypeVar("_A")


def _names(*expressions: str) -> dict[str, str]:
    """ExpressionAttributeNames for exactly the #aliases the expressions use:
    every attribute is aliased (owner, token, queue... may be reserved words), and
    DynamoDB rejects aliases an expression does not use."""
    return {f"#{name}": name for name in _ALIAS.findall(" ".join(expressions))}


def _epoch(seconds: float) -> dict[str, str]:
    return {"N": f"{seconds:.3f}"}  # ms precision, the value read back is the value written


def _int(value: int) -> dict[str, str]:
    return {"N": str(value)}


def _str(value: str) -> dict[str, str]:
    return {"S": value}


_ZERO, _ONE = _int(0), _int(1)
_FALSE, _TRUE = {"BOOL": False}, {"BOOL": True}


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _retry_attempts(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0))


def _lease_key(name: str) -> dict[str, dict[str, str]]:
    return {"pk": _str(LEASE_PREFIX + name)}


def _item_key(queue: str, item_id: str) -> dict[str, dict[str, str]]:
    # The queue part is escaped so that queue "a#b" + item "c" and queue "a" +
    # item "b#c" cannot share a key: the first unescaped "#" ends the queue.
    return {"pk": _str(f"{QUEUE_PREFIX}{quote(queue, safe='')}#{item_id}")}


def _qshard(queue: str, item_id: str, shards: int) -> str:
    # crc32, not hash(): stable across processes and Python versions.
    return f"{queue}#{zlib.crc32(item_id.encode('utf-8')) % shards}"


def _check_shards(value: object) -> int:
    try:
        shards = int(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else None
    except ValueError:
        shards = None
    if shards is None or not 1 <= shards <= MAX_SHARDS:
        raise ConfigError(f"dynamodb option shards must be an integer from 1 to {MAX_SHARDS}, got {value!r}")
    return shards


def _check_table(table: object) -> str:
    if not isinstance(table, str) or not TABLE_NAME.match(table):
        raise ConfigError(
            f"dynamodb table name must be 3-255 characters of A-Z a-z 0-9 _ . -, got {table!r}"
        )
    return table


def _check_endpoint(endpoint_url: str) -> str:
    parts = urlsplit(endpoint_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"dynamodb option endpoint_url must be an http(s) URL, got {endpoint_url!r}")
    return endpoint_url


def _client_config(timeout: float) -> Config:
    """Timeouts and retries sized so that one request, retries and backoff
    included, fails within ``timeout`` seconds (see timeouts.dynamodb_budget)."""
    attempts, connect, read = dynamodb_budget(timeout)
    return Config(
        connect_timeout=connect,
        read_timeout=read,
        retries={"mode": "standard", "total_max_attempts": attempts},
        max_pool_connections=2 * MAX_CONCURRENT_WRITES,
    )


# -- one deadline per call ---------------------------------------------------
# The deadline of the call the current thread sends requests for (the caller's
# thread for a call's first request, a pool thread for the others).
_active = threading.local()
_DEADLINE_HANDLER = "onceonly-call-deadline"


@dataclass
class Deadline:
    """One store call's time bound, fixed when the call starts: every request
    it sends, retries included, must start before ``at`` (time.monotonic)."""

    what: str
    seconds: float
    at: float = field(init=False)
    first: bool = field(init=False, default=True)  # no request sent yet

    def __post_init__(self) -> None:
        self.at = time.monotonic() + self.seconds

    def remaining(self) -> float:
        return self.at - time.monotonic()


class _DeadlinePassed(Exception):
    """Raised by the before-send hook: botocore neither sends nor retries it."""

    def __init__(self, attempt: int) -> None:
        super().__init__(f"the call's deadline passed before attempt {attempt}")
        self.attempt = attempt


class _CutOff(StoreUnavailableError):
    """One request of a call that its deadline cut off: ``sent`` when it may
    have reached DynamoDB (and been applied), not when it never left."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


def _bound_by_deadline(request: Any, **_: Any) -> None:
    """botocore ``before-send`` hook, run before every attempt of every request:
    past the deadline of the thread's call, refuse to send (a retry included);
    before it, wait for the reply no longer than the time left (botocore honours
    a per-request ``read_timeout`` since boto/botocore#3770; older versions keep
    the client's, and only the caller stops waiting)."""
    deadline: Deadline | None = getattr(_active, "deadline", None)
    context = getattr(request, "context", None)
    if deadline is None or context is None:
        return
    remaining = deadline.remaining()
    if remaining <= 0:
        raise _DeadlinePassed(int(context.get("retries", {}).get("attempt", 1)))
    configured = context["client_config"].read_timeout
    context["read_timeout"] = min(configured, remaining) if configured else remaining


def _outcome(request: Callable[[], _T]) -> _T | OnceOnlyError:
    try:
        return request()
    except OnceOnlyError as exc:
        return exc


def _under(deadline: Deadline, request: Callable[[], _T]) -> _T | OnceOnlyError:
    """``request`` with this thread's requests bound by ``deadline``."""
    _active.deadline = deadline
    try:
        return _outcome(request)
    finally:
        _active.deadline = None


@dataclass(frozen=True)
class _ClaimRound:
    """What every conditional claim write of one claim() call shares."""

    owner: str
    now: float
    until: float


class DynamoDBStore:
    """Leases and queues on one DynamoDB table. Pass your own boto3 DynamoDB
    client (built once per warm container) or build one with :meth:`from_url`.
    Raises StoreNotReadyError when the table is missing, StoreUnavailableError
    when DynamoDB cannot be reached or answers with an error.

    Every call but setup() ends within ``timeout`` seconds, however many
    requests it sends (see :meth:`_run`)."""

    kind = "dynamodb"

    def __init__(
        self, client: Any, table: str, shards: int = DEFAULT_SHARDS, *, owns_client: bool = False,
        clock: Callable[[], float] = time.time, timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self._client = client
        # Every "now" of this store (DynamoDB has no server clock): epoch seconds.
        self.clock = clock
        self.table = _check_table(table)
        self.shards = _check_shards(shards)
        self.timeout = common.check_seconds(timeout, "timeout")
        # A client built by from_url bounds each request by ``timeout`` itself,
        # so a call's first request can run on the caller's thread.
        self._owns_client = owns_client
        client.meta.events.register_first("before-send.dynamodb", _bound_by_deadline,
                                          unique_id=_DEADLINE_HANDLER)
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()
        self._transactions = True  # until the server says it has none (dynalite)

    @classmethod
    def from_url(
        cls, table: str, options: Mapping[str, str], *, clock: Callable[[], float] = time.time
    ) -> DynamoDBStore:
        """Build the store for ``dynamodb://TABLE?region=…&endpoint_url=…&shards=8&timeout=10``;
        ``options`` are the URL's query parameters; ``timeout`` (seconds) bounds
        each request, retries included. Raises ConfigError for an
        unknown or bad option, or when no region is given or configured."""
        unknown = sorted(set(options) - set(URL_OPTIONS))
        if unknown:
            raise ConfigError(
                f"unknown dynamodb option(s) {', '.join(unknown)}; expected {', '.join(URL_OPTIONS)}"
            )
        region = options.get("region")
        if region is not None and not region.strip():
            raise ConfigError("dynamodb option region must not be empty")
        endpoint_url = options.get("endpoint_url")
        if endpoint_url is not None:
            endpoint_url = _check_endpoint(endpoint_url)
        shards = _check_shards(options.get("shards", DEFAULT_SHARDS))
        table = _check_table(table)
        timeout = timeout_from(options)
        config = _client_config(timeout)
        try:
            client = boto3.session.Session().client(
                "dynamodb", region_name=region, endpoint_url=endpoint_url, config=config
            )
        except NoRegionError as exc:
            raise ConfigError(
                "dynamodb store needs a region: add ?region=… to the URL or set AWS_DEFAULT_REGION"
            ) from exc
        except BotoCoreError as exc:
            raise ConfigError(f"cannot build a DynamoDB client: {exc}") from exc
        return cls(client, table, shards, owns_client=True, clock=clock, timeout=timeout)

    # -- calls and error translation ------------------------------------------
    def _translate(self, what: str, exc: Exception) -> OnceOnlyError:
        """A botocore error -> the onceonly error the caller sees."""
        if isinstance(exc, ClientError):
            code = _error_code(exc)
            message = exc.response.get("Error", {}).get("Message", "")
            if code == "ResourceNotFoundException" or (
                code == "ValidationException" and "index" in message.lower()
            ):
                return StoreNotReadyError(
                    f"DynamoDB table {self.table!r} or its {INDEX_NAME!r} index is missing during {what};"
                    f" run store.setup() or deploy the template's CoordinationTable ({code}: {message})"
                )
            return StoreUnavailableError(
                f"DynamoDB error during {what} on table {self.table!r}: {code}: {message}"
            )
        if isinstance(exc, NoRegionError):
            return ConfigError(f"dynamodb store needs a region (during {what}): {exc}")
        if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError)):
            return StoreUnavailableError(f"DynamoDB unreachable during {what}: {exc}")
        return StoreUnavailableError(f"DynamoDB error during {what} on table {self.table!r}: {exc}")

    def _start(self, what: str) -> Deadline:
        """The deadline of a call that starts now."""
        return Deadline(what, self.timeout)

    def _cut_off(self, deadline: Deadline, *, sent: bool) -> _CutOff:
        if sent:
            return _CutOff(f"DynamoDB {deadline.what} on table {self.table!r}: no reply within the call's"
                           f" {deadline.seconds:g} s timeout; the request may have been applied", sent=True)
        return _CutOff(f"DynamoDB {deadline.what} on table {self.table!r}: not sent, the call's"
                       f" {deadline.seconds:g} s timeout had passed", sent=False)

    def _call(self, deadline: Deadline, operation: str, **kwargs: Any) -> dict[str, Any]:
        """One request of the call; its response."""
        return self._one(deadline, partial(self._send, deadline, operation, kwargs))

    def _conditional(self, deadline: Deadline, operation: str, **kwargs: Any) -> dict[str, Any] | None:
        """One conditional write of the call: its response, or None when the
        condition failed (contention or a stale holder: a normal result)."""
        return self._one(deadline, partial(self._send_conditional, deadline, operation, kwargs))

    def _one(self, deadline: Deadline, request: Callable[[], _T]) -> _T:
        """``request`` sends ONE request: the first of a call runs on the
        caller's thread when the client bounds it by the timeout already (built
        by from_url); any other goes through :meth:`_run`."""
        if deadline.first and self._owns_client:
            deadline.first = False
            outcome = _under(deadline, request)
        else:
            (outcome,) = self._run(deadline, [request])
        if isinstance(outcome, OnceOnlyError):
            raise outcome
        return outcome

    def _send(self, deadline: Deadline, operation: str, kwargs: dict[str, Any], *, table: bool = True
              ) -> dict[str, Any]:
        """One request on this thread (``table``: of the store's table)."""
        params = {"TableName": self.table, **kwargs} if table else kwargs
        try:
            response: dict[str, Any] = getattr(self._client, operation)(**params)
            return response
        except _DeadlinePassed as exc:
            raise self._cut_off(deadline, sent=exc.attempt > 1) from exc
        except (ClientError, BotoCoreError) as exc:
            raise self._translate(deadline.what, exc) from exc

    def _send_conditional(
        self, deadline: Deadline, operation: str, kwargs: dict[str, Any]
    ) -> dict[str, Any] | None:
        try:
            return self._send(deadline, operation, kwargs)
        except OnceOnlyError as error:
            exc = error.__cause__
            if not isinstance(exc, ClientError) or _error_code(exc) != "ConditionalCheckFailedException":
                raise
            if _retry_attempts(exc):
                # botocore sent this write again after an attempt that failed,
                # perhaps one whose reply was lost after it was applied: the
                # failed condition may be our own write. Say "unknown", not "no".
                raise StoreUnavailableError(
                    f"DynamoDB {deadline.what} on table {self.table!r}: the condition failed on a retry, so an"
                    " earlier attempt may have been applied; what it granted expires with its ttl/lease"
                ) from exc
            return None

    def _transact(self, deadline: Deadline, writes: list[dict[str, Any]]) -> Literal[True] | list[str] | None:
        """One TransactWriteItems: True when applied; when cancelled (all or
        nothing: none was applied), the cancellation reason code of each write;
        None when it was not applied and says nothing usable (a cancellation
        without one reason per write, which a DynamoDB-compatible server or
        proxy may send) or this server has no transactions (dynalite): then the
        caller writes item by item. The request token makes botocore's retry of
        a request whose reply was lost idempotent: DynamoDB answers it with the
        first attempt's outcome instead of applying it twice."""
        if not self._transactions:
            return None
        return self._one(deadline, partial(self._send_transaction, deadline, writes))

    def _send_transaction(self, deadline: Deadline, writes: list[dict[str, Any]]) -> Literal[True] | list[str] | None:
        try:
            self._send(deadline, "transact_write_items",
                       {"TransactItems": writes, "ClientRequestToken": secrets.token_hex(16)}, table=False)
            return True
        except OnceOnlyError as error:
            exc = error.__cause__
            code = _error_code(exc) if isinstance(exc, ClientError) else ""
            if isinstance(exc, ClientError) and code == "TransactionCanceledException":
                reasons = [str(reason.get("Code", "")) for reason in exc.response.get("CancellationReasons", [])]
                return reasons if len(reasons) == len(writes) else None
            if code == "UnknownOperationException":
                log.info("table %s: this DynamoDB server has no transactions; writing batches item by item",
                         self.table)
                self._transactions = False
                return None
            raise

    def _run(self, deadline: Deadline, requests: Sequence[Callable[[], _T]]) -> list[_T | OnceOnlyError]:
        """Each of ``requests`` (a function sending one or a few requests) under
        the call's deadline, results in input order; an onceonly error is
        returned in its slot so one failure does not hide the writes that
        succeeded.

        They run on the store's pool, concurrently (inline when already on a
        pool thread of this call), and the caller waits for them only until the
        deadline. A request the deadline cut off gets a _CutOff in its slot:
        ``sent`` when it may have been applied (it gets no more time than the
        deadline leaves: see _bound_by_deadline), not when it never left (one
        still queued for a pool thread is cancelled, and the before-send hook
        stops one that starts late, and botocore's retries)."""
        if getattr(_active, "deadline", None) is deadline:  # on a pool thread of this call already
            return [_outcome(request) for request in requests]
        deadline.first = False
        if deadline.remaining() <= 0:
            return [self._cut_off(deadline, sent=False) for _ in requests]
        futures = [self._pool().submit(_under, deadline, request) for request in requests]
        wait(futures, timeout=deadline.remaining())
        outcomes: list[_T | OnceOnlyError] = []
        for future in futures:
            if future.cancel():
                outcomes.append(self._cut_off(deadline, sent=False))
            elif future.done():
                outcomes.append(future.result())
            else:
                outcomes.append(self._cut_off(deadline, sent=True))
        return outcomes

    def _failure(self, deadline: Deadline, outcomes: Sequence[object], unfinished: str, noun: str) -> OnceOnlyError:
        """The one error a call raises when some of ``outcomes`` (one per
        request or write, at least one an error) failed: how many were answered,
        may have been applied, or were not sent, and what that leaves
        (``unfinished``). An error that is not about reaching the store (a
        missing table) is raised as it is."""
        errors = [o for o in outcomes if isinstance(o, OnceOnlyError)]
        cause = next((e for e in errors if not isinstance(e, _CutOff)), errors[0])
        if not isinstance(cause, StoreUnavailableError):
            return cause
        unsent = sum(1 for e in errors if isinstance(e, _CutOff) and not e.sent)
        error = StoreUnavailableError(
            f"DynamoDB {deadline.what} on table {self.table!r} did not finish (timeout {deadline.seconds:g} s):"
            f" {len(outcomes) - len(errors)} of {len(outcomes)} {noun} answered,"
            f" {len(errors) - unsent} failed or unanswered (they may have been applied),"
            f" {unsent} not sent; {unfinished}. First failure: {cause}"
        )
        error.__cause__ = cause
        return error

    def _pool(self) -> ThreadPoolExecutor:
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(MAX_CONCURRENT_WRITES, thread_name_prefix="onceonly-ddb")
            return self._executor

    # -- setup ------------------------------------------------------------
    def setup(self) -> None:
        """Create the table and its ``due`` GSI if missing, wait until they are
        ACTIVE, and turn on TTL by ``expire_at``. Idempotent, and safe when several
        processes call it at once."""
        table = self._describe_table()
        if table is None:
            self._create_table()
            table = self._wait_until_active()
        elif table.get("TableStatus") != "ACTIVE":
            table = self._wait_until_active()
        indexes = {index["IndexName"] for index in table.get("GlobalSecondaryIndexes", [])}
        if INDEX_NAME not in indexes:
            raise StoreNotReadyError(
                f"DynamoDB table {self.table!r} exists without the {INDEX_NAME!r} GSI"
                f" (hash qshard S, range claimable_at N, projection ALL): recreate it or add the index"
            )
        self._enable_ttl()

    def _enable_ttl(self) -> None:
        """Turn on TTL deletion by ``expire_at`` unless it is on already. A local
        stand-in without the TTL API (dynalite), or a role without the TTL
        permissions, keeps every record: logged, not an error, since nothing but
        the table's size depends on it."""
        try:
            status, attribute = self._ttl_status()
            if status in TTL_ON:
                if attribute != TTL_ATTRIBUTE:
                    log.warning("table %s expires items by %r, not %r: expiring records stay",
                                self.table, attribute, TTL_ATTRIBUTE)
                return
            try:
                self._client.update_time_to_live(
                    TableName=self.table,
                    TimeToLiveSpecification={"AttributeName": TTL_ATTRIBUTE, "Enabled": True},
                )
            except ClientError as exc:
                # A concurrent setup() may have enabled it since our describe.
                if _error_code(exc) != "ValidationException" or self._ttl_status()[0] not in TTL_ON:
                    raise
        except ClientError as exc:
            if _error_code(exc) == "UnknownOperationException":
                log.info("table %s: this DynamoDB server has no TTL API; expiring records stay", self.table)
                return
            if _error_code(exc) == "AccessDeniedException":
                # Leases do not depend on it: say what to grant (or declare TTL
                # with the table, as template.yaml does) and go on.
                log.warning("table %s: not allowed to check or turn on TTL by %r (dynamodb:DescribeTimeToLive,"
                            " dynamodb:UpdateTimeToLive); expiring records stay until TTL is on",
                            self.table, TTL_ATTRIBUTE)
                return
            raise self._translate("setup (enabling TTL)", exc) from exc
        except BotoCoreError as exc:
            raise self._translate("setup (enabling TTL)", exc) from exc

    def _ttl_status(self) -> tuple[str, str | None]:
        described = self._client.describe_time_to_live(TableName=self.table).get("TimeToLiveDescription", {})
        return str(described.get("TimeToLiveStatus", "DISABLED")), described.get("AttributeName")

    def _describe_table(self) -> dict[str, Any] | None:
        try:
            table: dict[str, Any] = self._client.describe_table(TableName=self.table)["Table"]
            return table
        except ClientError as exc:
            if _error_code(exc) == "ResourceNotFoundException":
                return None
            raise self._translate("setup", exc) from exc
        except BotoCoreError as exc:
            raise self._translate("setup", exc) from exc

    def _create_table(self) -> None:
        try:
            self._client.create_table(
                TableName=self.table,
                BillingMode="PAY_PER_REQUEST",
                AttributeDefinitions=[
                    {"AttributeName": "pk", "AttributeType": "S"},
                    {"AttributeName": "qshard", "AttributeType": "S"},
                    {"AttributeName": "claimable_at", "AttributeType": "N"},
                ],
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                GlobalSecondaryIndexes=[{
                    "IndexName": INDEX_NAME,
                    "KeySchema": [
                        {"AttributeName": "qshard", "KeyType": "HASH"},
                        {"AttributeName": "claimable_at", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                }],
            )
        except ClientError as exc:
            # Another process's setup() created it first: wait for theirs.
            if _error_code(exc) != "ResourceInUseException":
                raise self._translate("setup", exc) from exc
        except BotoCoreError as exc:
            raise self._translate("setup", exc) from exc

    def _wait_until_active(self) -> dict[str, Any]:
        try:
            self._client.get_waiter("table_exists").wait(
                TableName=self.table, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
            )
        except BotoCoreError as exc:  # WaiterError included
            raise self._translate("setup (waiting for the table)", exc) from exc
        table = self._describe_table()
        if table is None:
            raise StoreNotReadyError(f"DynamoDB table {self.table!r} vanished during setup()")
        return table

    def close(self) -> None:
        with self._executor_lock:
            if self._executor is not None:
                self._executor.shutdown(wait=True, cancel_futures=True)
                self._executor = None
        if self._owns_client:
            self._client.close()

    # -- leases -------------------------------------------------------------
    def acquire(self, name: str, ttl: float = 30.0) -> Lease | None:
        name, ttl = common.check_name(name), common.check_seconds(ttl, "ttl")
        now = self.clock()
        response = self._conditional(
            self._start("acquire"), "update_item",
            Key=_lease_key(name),
            ConditionExpression=LEASE_IS_FREE,
            UpdateExpression=GRANT_LEASE,
            ExpressionAttributeNames=_names(LEASE_IS_FREE, GRANT_LEASE),
            ExpressionAttributeValues={
                ":now": _epoch(now), ":until": _epoch(now + ttl), ":owner": _str(common.new_owner()),
                ":zero": _ZERO, ":one": _ONE, ":false": _FALSE,
            },
            ReturnValues="ALL_NEW",
        )
        return None if response is None else _lease_from(name, response["Attributes"])

    def renew(self, lease: Lease, ttl: float = 30.0) -> Lease:
        ttl = common.check_seconds(ttl, "ttl")
        response = self._write_if_held(
            "renew", lease, EXTEND_LEASE, {":until": _epoch(self.clock() + ttl)}, return_values="ALL_NEW"
        )
        if response is None:
            raise LeaseLostError(f"lease {lease.name!r} token {lease.token} is no longer held")
        return _lease_from(lease.name, response["Attributes"])

    def release(self, lease: Lease) -> bool:
        return self._write_if_held("release", lease, RELEASE_LEASE, {":now": _epoch(self.clock())}) is not None

    def complete(self, lease: Lease, keep: float = 86400.0, *, expire: bool = False) -> bool:
        keep = common.check_seconds(keep, "keep")
        until = self.clock() + keep
        values = {":until": _epoch(until), ":true": _TRUE}
        if common.check_flag(expire, "expire"):
            values[":expire_at"] = _int(math.ceil(until))
            return self._write_if_held("complete", lease, COMPLETE_EXPIRING_LEASE, values) is not None
        return self._write_if_held("complete", lease, COMPLETE_LEASE, values) is not None

    def _write_if_held(
        self, what: str, lease: Lease, update: str, values: dict[str, Any], return_values: str = "NONE"
    ) -> dict[str, Any] | None:
        return self._conditional(
            self._start(what), "update_item",
            Key=_lease_key(common.check_lease(lease).name),
            ConditionExpression=LEASE_IS_HELD_BY_CALLER,
            UpdateExpression=update,
            ExpressionAttributeNames=_names(LEASE_IS_HELD_BY_CALLER, update),
            ExpressionAttributeValues={
                ":owner": _str(lease.owner), ":token": _int(lease.token), ":false": _FALSE, **values,
            },
            ReturnValues=return_values,
        )

    def inspect(self, name: str) -> LeaseState | None:
        key = _lease_key(common.check_name(name))
        response = self._call(self._start("inspect"), "get_item", Key=key, ConsistentRead=True)
        item = response.get("Item")
        if item is None:
            return None
        return LeaseState(
            name=name,
            owner=item["owner"]["S"] if "owner" in item else None,
            token=int(item["token"]["N"]),
            busy_until=float(item["busy_until"]["N"]),
            completed=bool(item["completed"]["BOOL"]),
        )

    def queue(self, name: str) -> DynamoDBQueue:
        return DynamoDBQueue(self, common.check_name(name, "queue name"))


def _lease_from(name: str, attributes: dict[str, Any]) -> Lease:
    return Lease(
        name=name,
        owner=attributes["owner"]["S"],
        token=int(attributes["token"]["N"]),
        expires_at=float(attributes["busy_until"]["N"]),
    )


def _page_size(needed: int) -> int:
    # A little above what is still needed: some listed items will be lost to
    # other claimers or be stale in the eventually consistent GSI.
    return needed + max(2, needed // 4)


# What a call that did not finish may have left, per kind of call (the end of
# its StoreUnavailableError message).
PUT_MANY_UNFINISHED = "an unanswered put may have been written; put_many again writes them all"
ACKS_UNFINISHED = ("an unanswered ack may have been applied (its item is then gone); an item not acked"
                   " returns to the queue when its lease ends")
CLAIM_UNFINISHED = ("an item granted by an unanswered write is held by nobody and returns to the queue"
                    " when its lease ends")
DEPTH_UNFINISHED = "depth only reads"


class DynamoDBQueue:
    """A due queue on the store's table; see the module docstring for the layout."""

    def __init__(self, store: DynamoDBStore, name: str) -> None:
        self._store = store
        self.name = name

    def _key(self, item_id: str) -> dict[str, dict[str, str]]:
        return _item_key(self.name, item_id)

    def _shard_keys(self) -> list[str]:
        return [f"{self.name}#{k}" for k in range(self._store.shards)]

    def put(self, item_id: str, due_at: float | None = None, payload: Any = None) -> None:
        put = common.check_put(item_id, due_at, payload)
        self._store._call(self._store._start("put"), "update_item", **self._put_write(put))

    def put_many(self, items: Iterable[tuple[str, float | None, Any]]) -> int:
        """The puts in TransactWriteItems of up to 100 (see :meth:`_write_all`).
        Not BatchWriteItem: its PutItem replaces the whole record, which would
        reset the token and attempt count of an item that is rescheduled."""
        puts = common.check_put_items(items)
        # One write per id (the later entry wins): a transaction takes an item
        # once, and concurrent writes of one item would land in any order.
        writes = [("update_item", self._put_write(put)) for put in common.last_put_per_item(puts)]
        self._write_all(self._store._start("put_many"), writes, PUT_MANY_UNFINISHED)
        return len(puts)

    def _put_write(self, put: common.CheckedPut) -> dict[str, Any]:
        return {
            "Key": self._key(put.item_id),
            "UpdateExpression": PUT_ITEM,
            "ExpressionAttributeNames": _names(PUT_ITEM),
            "ExpressionAttributeValues": {
                ":payload": _str(put.payload),
                ":due": _epoch(self._store.clock() if put.due_at is None else put.due_at),
                ":qshard": _str(_qshard(self.name, put.item_id, self._store.shards)),
                ":queue": _str(self.name), ":item_id": _str(put.item_id), ":zero": _ZERO,
            },
        }

    def _write_all(
        self, deadline: Deadline, writes: Sequence[tuple[str, dict[str, Any]]], unfinished: str
    ) -> list[bool]:
        """Writes, each (operation, parameters), conditions kept: whether each
        was applied (False: its condition failed).

        In TransactWriteItems of up to 100 writes: one API call per batch
        instead of one per item, at twice the write capacity per item. A
        transaction is all or nothing, so when it is cancelled it is sent once
        more without the writes whose condition failed (a stale ack). What is
        still refused after that (a conflict with a concurrent write), a second
        write of an item already in the transaction (a stale and a fresh claim
        of one item), and everything on a server without transactions
        (dynalite) is written item by item, concurrently. When a request fails
        or the deadline passes, no further batch is sent and StoreUnavailableError
        says how many writes were answered, may have been applied, or were not
        sent (``unfinished`` says what that leaves)."""
        outcomes: list[bool | OnceOnlyError] = [self._store._cut_off(deadline, sent=False)] * len(writes)
        sizes = [len(json.dumps(params)) for _, params in writes]
        for batch in common.batches(sizes, MAX_TRANSACTION_ITEMS, MAX_TRANSACTION_BYTES):
            first_of_item = {writes[i][1]["Key"]["pk"]["S"]: i for i in reversed(batch)}
            try:
                transacted, refused = self._transacted(deadline, writes, sorted(first_of_item.values()))
            except OnceOnlyError as exc:
                for i in batch:
                    outcomes[i] = exc
                raise self._store._failure(deadline, outcomes, unfinished, "writes") from exc
            for i in batch:
                outcomes[i] = i in transacted  # a refused write is not applied: False
            one_by_one = [i for i in batch if i not in transacted and i not in refused]
            results = self._store._run(deadline, [partial(self._write_one, deadline, *writes[i]) for i in one_by_one])
            for i, result in zip(one_by_one, results, strict=True):
                outcomes[i] = result
            if any(isinstance(result, OnceOnlyError) for result in results):
                raise self._store._failure(deadline, outcomes, unfinished, "writes")
        return [outcome is True for outcome in outcomes]

    def _write_one(self, deadline: Deadline, operation: str, params: dict[str, Any]) -> bool:
        return self._store._send_conditional(deadline, operation, params) is not None

    def _transacted(
        self, deadline: Deadline, writes: Sequence[tuple[str, dict[str, Any]]], indices: list[int]
    ) -> tuple[set[int], set[int]]:
        """Up to TRANSACTION_ROUNDS transactions of ``writes[indices]`` (distinct
        items): (the writes applied, the writes refused by their condition)."""
        pending, refused = indices, set[int]()
        for _ in range(TRANSACTION_ROUNDS):
            if not pending:
                break
            codes = self._store._transact(deadline, [self._transaction_item(*writes[i]) for i in pending])
            if codes is True:
                return set(pending), refused
            if codes is None:  # not applied, nothing said why: item by item
                break
            refused |= {i for i, code in zip(pending, codes, strict=True) if code == CONDITION_FAILED}
            pending = [i for i in pending if i not in refused]
        return set(), refused

    def _transaction_item(self, operation: str, params: dict[str, Any]) -> dict[str, Any]:
        return {_TRANSACTION_OPERATIONS[operation]: {"TableName": self._store.table, **params}}

    def cancel(self, item_id: str) -> bool:
        key = self._key(common.check_name(item_id, "item_id"))
        response = self._store._call(self._store._start("cancel"), "delete_item", Key=key, ReturnValues="ALL_OLD")
        return bool(response.get("Attributes"))

    # -- claim ------------------------------------------------------------
    def claim(self, limit: int = 25, lease: float = 60.0, *, acks: Sequence[Claim] = ()) -> ClaimBatch:
        """See :class:`onceonly.Queue`. ``acks`` are acked first (as ack_many),
        then the claim runs, all within one deadline. Every argument is checked
        before the first request."""
        acks = common.check_claims(acks, self.name)
        limit, lease = common.check_limit(limit), common.check_seconds(lease, "lease")
        deadline = self._store._start("claim")
        acked = self._ack_all(deadline, acks) if acks else []
        return ClaimBatch(self._claim(deadline, limit, lease), acked)

    def _claim(self, deadline: Deadline, limit: int, lease: float) -> list[Claim]:
        """Walks the shards from a random one, so concurrent claimers start
        apart. If DynamoDB fails, or the deadline passes, after some items were
        granted, those are returned (the failure is logged) rather than lost."""
        now = self._store.clock()
        claim_round = _ClaimRound(owner=common.new_owner(), now=now, until=now + lease)
        shard_keys = self._shard_keys()
        start = random.randrange(len(shard_keys))
        claims: list[Claim] = []
        try:
            for qshard in shard_keys[start:] + shard_keys[:start]:
                self._claim_in_shard(deadline, qshard, claim_round, limit, claims)
                if len(claims) >= limit:
                    break
        except StoreUnavailableError:
            if not claims:
                raise
            log.warning("onceonly dynamodb claim: returning %d granted items after a store error",
                        len(claims), extra={"queue": self.name, "owner": claim_round.owner}, exc_info=True)
        return claims

    def _claim_in_shard(
        self, deadline: Deadline, qshard: str, claim_round: _ClaimRound, limit: int, claims: list[Claim]
    ) -> None:
        """Page through the shard's due items, oldest first, claiming in waves of
        at most what is still needed, so that wins never exceed ``limit``.
        Appends to ``claims`` as writes succeed, so a later failure keeps them."""
        start_key: dict[str, Any] | None = None
        while len(claims) < limit:
            page = self._due_page(deadline, qshard, claim_round.now, _page_size(limit - len(claims)), start_key)
            candidates = [item["pk"]["S"] for item in page.get("Items", [])]
            while candidates and len(claims) < limit:
                needed = limit - len(claims)
                wave, candidates = candidates[:needed], candidates[needed:]
                outcomes = self._store._run(deadline, [partial(self._grant, deadline, pk, claim_round) for pk in wave])
                claims.extend(o for o in outcomes if isinstance(o, Claim))
                if any(isinstance(o, OnceOnlyError) for o in outcomes):
                    raise self._store._failure(deadline, outcomes, CLAIM_UNFINISHED, "claim writes")
            start_key = page.get("LastEvaluatedKey")
            if start_key is None:
                return

    def _due_page(
        self, deadline: Deadline, qshard: str, now: float, size: int, start_key: dict[str, Any] | None
    ) -> dict[str, Any]:
        extra = {"ExclusiveStartKey": start_key} if start_key else {}
        return self._store._call(
            deadline, "query",
            IndexName=INDEX_NAME,
            KeyConditionExpression=DUE_IN_SHARD,
            ProjectionExpression="#pk",
            ExpressionAttributeNames=_names(DUE_IN_SHARD, "#pk"),
            ExpressionAttributeValues={":qshard": _str(qshard), ":now": _epoch(now)},
            Limit=size,
            **extra,
        )

    def _grant(self, deadline: Deadline, pk: str, claim_round: _ClaimRound) -> Claim | None:
        """One conditional claim write; None if another claimer got there first.
        The lease's end is fixed when the call starts, so a write the caller
        never hears of (cut off by the deadline) still ends at that time."""
        response = self._store._send_conditional(deadline, "update_item", {
            "Key": {"pk": _str(pk)},
            "ConditionExpression": ITEM_IS_CLAIMABLE,
            "UpdateExpression": GRANT_ITEM,
            "ExpressionAttributeNames": _names(ITEM_IS_CLAIMABLE, GRANT_ITEM),
            "ExpressionAttributeValues": {
                ":now": _epoch(claim_round.now), ":until": _epoch(claim_round.until),
                ":owner": _str(claim_round.owner), ":one": _ONE,
            },
            "ReturnValues": "ALL_NEW",
        })
        if response is None:
            return None
        item = response["Attributes"]
        return Claim(
            queue=self.name,
            item_id=item["item_id"]["S"],
            payload=common.decode_payload(item["payload"]["S"]),
            token=int(item["token"]["N"]),
            attempt=int(item["attempt"]["N"]),
            owner=item["owner"]["S"],
            lease_expires_at=float(item["claimable_at"]["N"]),
        )

    # -- finishing a claim ----------------------------------------------------
    def ack(self, claim: Claim) -> bool:
        return self._ack_all(self._store._start("ack"), [common.check_claim(claim, self.name)])[0]

    def ack_many(self, claims: Sequence[Claim]) -> list[bool]:
        """Conditional deletes, in transactions of up to 100 (see :meth:`_write_all`):
        one API call for a batch whose claims are all still held."""
        return self._ack_all(self._store._start("ack_many"), common.check_claims(claims, self.name))

    def _ack_all(self, deadline: Deadline, claims: Sequence[Claim]) -> list[bool]:
        # One delete per item: a claim listed twice is acked once, in order.
        first_index = {common.grant_key(c): i for i, c in reversed(list(enumerate(claims)))}
        distinct = [claims[i] for i in sorted(first_index.values())]
        applied = self._write_all(deadline, [("delete_item", self._ack_write(c)) for c in distinct], ACKS_UNFINISHED)
        acked = {common.grant_key(c): a for c, a in zip(distinct, applied, strict=True)}
        return [acked[common.grant_key(c)] and first_index[common.grant_key(c)] == i
                for i, c in enumerate(claims)]

    def _ack_write(self, claim: Claim) -> dict[str, Any]:
        return {
            "Key": self._key(claim.item_id),
            "ConditionExpression": ITEM_IS_HELD_BY_CALLER,
            "ExpressionAttributeNames": _names(ITEM_IS_HELD_BY_CALLER),
            "ExpressionAttributeValues": {":token": _int(claim.token), ":owner": _str(claim.owner)},
        }

    def retry(self, claim: Claim, due_at: float) -> bool:
        claim, due = common.check_claim(claim, self.name), common.check_retry_due_at(due_at)
        response = self._store._conditional(
            self._store._start("retry"), "update_item",
            Key=self._key(claim.item_id),
            ConditionExpression=ITEM_IS_HELD_BY_CALLER,
            UpdateExpression=RESCHEDULE_ITEM,
            ExpressionAttributeNames=_names(ITEM_IS_HELD_BY_CALLER, RESCHEDULE_ITEM),
            ExpressionAttributeValues={
                ":token": _int(claim.token), ":owner": _str(claim.owner), ":due": _epoch(due),
            },
        )
        return response is not None

    # -- depth --------------------------------------------------------------
    def depth(self) -> QueueDepth:
        """Counts per shard, read from the eventually consistent GSI."""
        deadline, now = self._store._start("depth"), self._store.clock()
        outcomes = self._store._run(deadline, [partial(self._shard_depth, deadline, shard, now)
                                               for shard in self._shard_keys()])
        shards = [outcome for outcome in outcomes if isinstance(outcome, QueueDepth)]
        if len(shards) < len(outcomes):
            raise self._store._failure(deadline, outcomes, DEPTH_UNFINISHED, "shard counts")
        return QueueDepth(
            due=sum(s.due for s in shards),
            scheduled=sum(s.scheduled for s in shards),
            in_flight=sum(s.in_flight for s in shards),
        )

    def _shard_depth(self, deadline: Deadline, qshard: str, now: float) -> QueueDepth:
        due = self._count(deadline, qshard, now, DUE_IN_SHARD)[0]
        # Not yet due: held ones have an owner (claimable_at is their lease
        # expiry); the rest wait for their due time.
        with_owner, not_due = self._count(deadline, qshard, now, NOT_DUE_IN_SHARD, HAS_OWNER)
        return QueueDepth(due=due, scheduled=not_due - with_owner, in_flight=with_owner)

    def _count(
        self, deadline: Deadline, qshard: str, now: float, key_condition: str, item_filter: str | None = None
    ) -> tuple[int, int]:
        """(items matching the filter, items matching the key condition), all pages."""
        extra: dict[str, Any] = {"FilterExpression": item_filter} if item_filter else {}
        matched = scanned = 0
        while True:
            page = self._store._call(
                deadline, "query",
                IndexName=INDEX_NAME,
                KeyConditionExpression=key_condition,
                ExpressionAttributeNames=_names(key_condition, item_filter or ""),
                ExpressionAttributeValues={":qshard": _str(qshard), ":now": _epoch(now)},
                Select="COUNT",
                **extra,
            )
            matched += int(page.get("Count", 0))
            scanned += int(page.get("ScannedCount", 0))
            if "LastEvaluatedKey" not in page:
                return matched, scanned
            extra["ExclusiveStartKey"] = page["LastEvaluatedKey"]
