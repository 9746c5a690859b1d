"""The requests a store sends to its table: one place that calls botocore,
translates its errors, runs requests concurrently on the store's pool, and
holds each call to its deadline (deadline.py)."""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import AbstractContextManager
from functools import partial
from typing import Any, Literal, TypeVar

from botocore.exceptions import ClientError, ConnectTimeoutError, EndpointConnectionError

from ...errors import OnceOnlyError, StoreUnavailableError
from ..errors import translated
from . import deadline as deadlines
from . import errors
from .deadline import CutOff, Deadline, DeadlinePassed
from .errors import error_code

log = logging.getLogger(__name__)

# Requests of one call sent at once; the HTTP pool is sized above it.
MAX_CONCURRENT_WRITES = 16
_T = TypeVar("_T")


def _retry_attempts(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0))


# Whether an attempt of the request this thread is sending may have been
# applied without the caller hearing of it (see note_uncertain_attempt).
_attempts = threading.local()
# Errors DynamoDB answers before applying anything: the request rate, not the write.
_NOT_APPLIED_CODES = frozenset({
    "ThrottlingException", "ProvisionedThroughputExceededException", "RequestLimitExceeded",
    "TransactionInProgressException",
})
NEEDS_RETRY_EVENT = "needs-retry.dynamodb"
NEEDS_RETRY_HOOK_ID = "onceonly-uncertain-attempts"


def note_uncertain_attempt(response: Any = None, caught_exception: Any = None, **_: Any) -> None:
    """botocore's ``needs-retry`` hook, run after every attempt: marks the
    thread's request as possibly applied when an attempt got no answer (a
    timeout, a reset: not a connect that failed) or a 5xx. A throttle is an
    answer that nothing was applied. Returns None: botocore's retry policy
    decides the retry."""
    if caught_exception is not None:
        uncertain = not isinstance(caught_exception, (ConnectTimeoutError, EndpointConnectionError))
    else:
        http, parsed = response if isinstance(response, tuple) else (None, {})
        status = int(getattr(http, "status_code", 0) or 0)
        code = str((parsed or {}).get("Error", {}).get("Code", ""))
        uncertain = status >= 500 and code not in _NOT_APPLIED_CODES
    if uncertain:
        _attempts.uncertain = True


class Table:
    """One DynamoDB table behind one boto3 client. ``timeout`` bounds every call
    (:meth:`start`); ``owns_client``: the client was built by from_url, so its
    own timeouts bound each request by ``timeout`` already."""

    def __init__(self, client: Any, name: str, timeout: float, *, owns_client: bool) -> None:
        self.client = client
        self.name = name
        self.timeout = timeout
        self.owns_client = owns_client
        client.meta.events.register_first(deadlines.HOOK_EVENT, deadlines.bound_by_deadline,
                                          unique_id=deadlines.HOOK_ID)
        client.meta.events.register_first(NEEDS_RETRY_EVENT, note_uncertain_attempt, unique_id=NEEDS_RETRY_HOOK_ID)
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()
        self.transactions = True  # until the server says it has none (dynalite)

    def start(self, what: str) -> Deadline:
        """The deadline of a call that starts now."""
        return Deadline(what, self.timeout)

    def translate(self, exc: BaseException, what: str) -> OnceOnlyError | None:
        """errors.translate for this table."""
        return errors.translate(exc, what, table=self.name)

    def translated(self, what: str) -> AbstractContextManager[None]:
        """A botocore error in the block leaves it as the onceonly error it means."""
        return translated(self.translate, what)

    def cut_off(self, deadline: Deadline, *, sent: bool) -> CutOff:
        if sent:
            return CutOff(f"DynamoDB {deadline.what} on table {self.name!r}: no reply within the call's"
                          f" {deadline.seconds:g} s timeout; the request may have been applied", sent=True)
        return CutOff(f"DynamoDB {deadline.what} on table {self.name!r}: not sent, the call's"
                      f" {deadline.seconds:g} s timeout had passed", sent=False)

    # -- one request -------------------------------------------------------------
    def call(self, deadline: Deadline, operation: str, **kwargs: Any) -> dict[str, Any]:
        """One request of the call; its response."""
        return self._one(deadline, partial(self.send, deadline, operation, kwargs))

    def conditional(self, deadline: Deadline, operation: str, **kwargs: Any) -> dict[str, Any] | None:
        """One conditional write of the call: its response, or None when the
        condition failed (contention or a stale holder: a normal result)."""
        return self._one(deadline, partial(self.send_conditional, deadline, operation, kwargs))

    def conditional_or_old(self, deadline: Deadline, operation: str, **kwargs: Any
                           ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """:meth:`conditional`, asking for the item as it was when the
        condition failed (``ReturnValuesOnConditionCheckFailure=ALL_OLD``): its
        response and None when applied; None and that item when the condition
        failed, or None and None where the server sends no item (dynalite)."""
        return self._one(deadline, partial(self._send_conditional_or_old, deadline, operation,
                                           {**kwargs, "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}))

    def transact(self, deadline: Deadline, writes: list[dict[str, Any]]) -> Literal[True] | list[str] | None:
        """One TransactWriteItems: True when applied; when cancelled (all or
        nothing: none was applied), the cancellation reason code of each write;
        None when it was not applied and says nothing usable (a cancellation
        without one reason per write, which a DynamoDB-compatible server or
        proxy may send) or this server has no transactions (dynalite): then the
        caller writes item by item. The request token makes botocore's retry of
        a request whose reply was lost idempotent: DynamoDB answers it with the
        first attempt's outcome instead of applying it twice."""
        if not self.transactions:
            return None
        return self._one(deadline, partial(self._send_transaction, deadline, writes))

    def _one(self, deadline: Deadline, request: Callable[[], _T]) -> _T:
        """``request`` sends ONE request: the first of a call runs on the
        caller's thread when the client bounds it by the timeout already (built
        by from_url); any other goes through :meth:`run`."""
        if deadline.first and self.owns_client:
            deadline.first = False
            result = deadlines.under(deadline, request)
        else:
            (result,) = self.run(deadline, [request])
        if isinstance(result, OnceOnlyError):
            raise result
        return result

    # -- sending, on the current thread -------------------------------------------
    def send(self, deadline: Deadline, operation: str, kwargs: dict[str, Any], *, table: bool = True
             ) -> dict[str, Any]:
        """One request on this thread (``table``: of this table)."""
        params = {"TableName": self.name, **kwargs} if table else kwargs
        _attempts.uncertain = False
        try:
            with self.translated(deadline.what):
                response: dict[str, Any] = getattr(self.client, operation)(**params)
            return response
        except DeadlinePassed as exc:
            raise self.cut_off(deadline, sent=exc.attempt > 1) from exc

    def send_conditional(self, deadline: Deadline, operation: str, kwargs: dict[str, Any]) -> dict[str, Any] | None:
        """:meth:`send` of a conditional write: None when its condition failed."""
        return self._send_conditional_or_old(deadline, operation, kwargs)[0]

    def _send_conditional_or_old(self, deadline: Deadline, operation: str, kwargs: dict[str, Any]
                                 ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """:meth:`send` of a conditional write: (its response, None), or (None,
        the item the failed condition saw, if the server sent it)."""
        try:
            return self.send(deadline, operation, kwargs), None
        except OnceOnlyError as error:
            exc = error.__cause__
            if not isinstance(exc, ClientError) or error_code(exc) != "ConditionalCheckFailedException":
                raise
            if _retry_attempts(exc) and getattr(_attempts, "uncertain", True):
                # botocore sent this write again after an attempt that may have
                # been applied (no answer, or a 5xx): the failed condition may
                # be our own write. Say "unknown", not "no". After a throttle
                # only, the condition failed on someone else's write: contention.
                raise StoreUnavailableError(
                    f"DynamoDB {deadline.what} on table {self.name!r}: the condition failed on a retry, so an"
                    " earlier attempt may have been applied; what it granted expires with its ttl/lease"
                ) from exc
            seen: dict[str, Any] | None = exc.response.get("Item")  # type: ignore[assignment]
            return None, seen

    def _send_transaction(self, deadline: Deadline, writes: list[dict[str, Any]]) -> Literal[True] | list[str] | None:
        try:
            self.send(deadline, "transact_write_items",
                      {"TransactItems": writes, "ClientRequestToken": secrets.token_hex(16)}, table=False)
            return True
        except OnceOnlyError as error:
            exc = error.__cause__
            code = error_code(exc) if isinstance(exc, ClientError) else ""
            if isinstance(exc, ClientError) and code == "TransactionCanceledException":
                reasons = [str(reason.get("Code", "")) for reason in exc.response.get("CancellationReasons", [])]
                return reasons if len(reasons) == len(writes) else None
            if code == "UnknownOperationException":
                log.info("table %s: this DynamoDB server has no transactions; writing batches item by item",
                         self.name)
                self.transactions = False
                return None
            raise

    # -- many requests -------------------------------------------------------------
    def run(self, deadline: Deadline, requests: Sequence[Callable[[], _T]]) -> list[_T | OnceOnlyError]:
        """Each of ``requests`` (a function sending one or a few requests) under
        the call's deadline, results in input order; an onceonly error is
        returned in its slot so one failure does not hide the writes that
        succeeded.

        They run on the store's pool, concurrently (inline when already on a
        pool thread of this call), and the caller waits for them only until the
        deadline. A request the deadline cut off gets a CutOff in its slot:
        ``sent`` when it may have been applied (it gets no more time than the
        deadline leaves: see deadline.bound_by_deadline), not when it never left
        (one still queued for a pool thread is cancelled, and the before-send
        hook stops one that starts late, and botocore's retries)."""
        if deadlines.current() is deadline:  # on a pool thread of this call already
            return [deadlines.outcome(request) for request in requests]
        deadline.first = False
        if deadline.remaining() <= 0:
            return [self.cut_off(deadline, sent=False) for _ in requests]
        futures = [self._pool().submit(deadlines.under, deadline, request) for request in requests]
        wait(futures, timeout=deadline.remaining())
        outcomes: list[_T | OnceOnlyError] = []
        for future in futures:
            if future.cancel():
                outcomes.append(self.cut_off(deadline, sent=False))
            elif future.done():
                outcomes.append(future.result())
            else:
                outcomes.append(self.cut_off(deadline, sent=True))
        return outcomes

    def failure(self, deadline: Deadline, outcomes: Sequence[object], unfinished: str, noun: str) -> OnceOnlyError:
        """The one error a call raises when some of ``outcomes`` (one per
        request or write, at least one an error) failed: how many were answered,
        may have been applied, or were not sent, and what that leaves
        (``unfinished``). An error that is not about reaching the store (a
        missing table) is raised as it is."""
        errors = [o for o in outcomes if isinstance(o, OnceOnlyError)]
        cause = next((e for e in errors if not isinstance(e, CutOff)), errors[0])
        if not isinstance(cause, StoreUnavailableError):
            return cause
        unsent = sum(1 for e in errors if isinstance(e, CutOff) and not e.sent)
        error = StoreUnavailableError(
            f"DynamoDB {deadline.what} on table {self.name!r} did not finish (timeout {deadline.seconds:g} s):"
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

    def close(self) -> None:
        with self._executor_lock:
            if self._executor is not None:
                self._executor.shutdown(wait=True, cancel_futures=True)
                self._executor = None
        if self.owns_client:
            self.client.close()
