"""One SQS batch of the dispatcher: each record fails alone, and why it failed
decides when SQS brings it back.

- Malformed (bad JSON, a missing field, an unknown webhook): a permanent fault
  of the message. It fails; SQS brings it back after the queue's visibility
  timeout, and after maxReceiveCount receives moves it to the dead-letter queue.
- Not started for lack of time (DeadlineNearError): it fails with nothing
  written, and comes back after the visibility timeout. Phase 1 (below)
  takes the records sure to start in time even if every earlier one took
  its whole attempt budget (lanes.latest_starts); each other record is
  started alone when its turn comes, if the invocation has the time then.
- A store is unavailable (the database or the coordination store): the record
  and every later one of the batch fail without being tried, since each would
  wait for the same outage. Each gets a visibility timeout that doubles with its
  receive count (:func:`outage_visibility`), so that the receives SQS allows
  span a long outage rather than half an hour: a valid event is not moved to
  the dead-letter queue as if it were malformed.

The records before the outage are done and are not sent back (partial batch
response), which is why the batch is not failed as a whole.

The batch runs in three phases, so that its store work costs one round trip
per kind of work rather than per record (service.py: start_batch, try_started,
finish_batch):

1. for all records at once: parse; which subscriptions exist; the deliveries'
   INSERT; their safety nets; the first attempts' start. An outage here
   stops every record (a delivery created meanwhile is a duplicate when SQS
   brings its record back, and re-arms its safety net);
2. per record, concurrently (lanes.py): at most ``max_in_flight`` at once,
   and, under WEBHOOK_SERIAL_PER_SUBSCRIPTION, the records of one subscription
   one after another in batch order: admission, signing, the POST;
3. for all records at once: the outcomes, the queue items. An outage here
   fails every record that reached it; their deliveries were attempted and
   counted, and their safety nets bring them to a retry worker.

Each record keeps its own outcome; the batch processor reads them in batch order."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from onceonly.errors import StoreUnavailableError
from onceonly_app.runtime.budget import Budget

from .lanes import latest_starts, run_in_lanes
from .messages import DeliveryRequest, MalformedMessageError, parse_message
from .service import DeadlineNearError, DispatchResult, Outcome, Started, WebhookService

OUTAGE_VISIBILITY_FIRST = 60  # seconds before the first retry of a record an outage stopped
OUTAGE_VISIBILITY_MAX = 43_200  # SQS's longest visibility timeout (12 h)
SQS_BATCH = 10  # ChangeMessageVisibilityBatch takes at most 10 entries
LATE = object()  # a record phase 1 left to be started at its turn


class MalformedBatchError(ValueError):
    """The event is not an SQS batch Lambda could have sent: no ``Records``
    list, or a record that is not an object or has no ``messageId`` (without
    one a record cannot be reported alone). Nothing was processed; the
    invocation fails, so SQS would return the whole batch."""


def check_sqs_event(event: Any) -> None:
    """Raise MalformedBatchError unless ``event`` has the shape of an SQS batch.
    A record's body is not checked here: a bad body fails that record alone."""
    records = event.get("Records") if isinstance(event, dict) else None
    if not isinstance(records, list) or not records:
        raise MalformedBatchError(f"not an SQS event: expected a non-empty 'Records' list in an object, got "
                                  f"{type(records if isinstance(event, dict) else event).__name__}")
    for n, record in enumerate(records):
        message_id = record.get("messageId") if isinstance(record, dict) else None
        if not isinstance(message_id, str) or not message_id:
            raise MalformedBatchError(f"SQS record {n} is not an object with a non-empty string messageId")


def fail_if_nothing_went_through(processor: BatchProcessor) -> None:
    """After the batch: when every record failed and not all of them for a fault
    of their own (a store outage, a missing schema, no time left), fail the
    invocation as Powertools does by default (BatchProcessingError), so the
    function's error metric and schema_required see it. A batch whose records
    were all malformed is answered record by record, like any other."""
    if processor.success_messages or not processor.fail_messages:
        return
    if all(isinstance(exc, MalformedMessageError) for _, exc, _ in processor.exceptions):
        return
    raise BatchProcessingError(msg=f"All records failed processing. {len(processor.exceptions)} individual "
                               "errors logged separately below.", child_exceptions=processor.exceptions)


def outage_visibility(receive_count: int) -> int:
    """Seconds until a record stopped by an outage is received again: 60 s after
    its first receive, doubling each time, at most 12 h. With maxReceiveCount 12
    (template.yaml) a valid event survives about 29 hours of outage."""
    return min(OUTAGE_VISIBILITY_FIRST * 2 ** max(0, receive_count - 1), OUTAGE_VISIBILITY_MAX)


class DispatchBatch:
    """Per invocation: ``run`` handles every record (``handle`` each, concurrently),
    then ``outcome`` is the batch processor's record handler."""

    def __init__(self, service: WebhookService, budget: Budget, log: logging.Logger | Any) -> None:
        self.service = service
        self.budget = budget
        self.log = log
        self.outage: StoreUnavailableError | None = None
        self.stopped_by_outage: list[SQSRecord] = []
        # By record, not messageId: a hostile batch may repeat one (SQS never does).
        self._requests: dict[int, DeliveryRequest | MalformedMessageError] = {}
        self._started: dict[int, Started | DispatchResult | Exception | object] = {}
        self._outcomes: dict[int, DispatchResult | _Tried | Exception] = {}
        # Under WEBHOOK_SERIAL_PER_SUBSCRIPTION: a lane's latest record held back by
        # its endpoint's limit, and when it is due; the lane's later records wait behind it.
        self._held_back: dict[str, float] = {}
        self._lease_ends_by: float | None = None  # the batch's first safety net (run)
        self._last_of_endpoint: set[int] = set()  # each subscription's last record of the batch (run)

    def run(self, records: list[SQSRecord]) -> None:
        """Handle every record in the three phases; returns when all have finished."""
        valid = [(record, request) for record in records
                 if not isinstance(request := self._request(record), MalformedMessageError)]
        # Phase 1 takes the records sure to start in time even if every earlier
        # one took its whole attempt budget; the others are started one by one
        # when their turn comes, if there is time left then (nothing is written
        # for one that is not).
        starts = latest_starts(records, self._lane, self.service.config.max_in_flight,
                               self.service.config.attempt_budget)
        late = {_key(record) for record, start in zip(records, starts, strict=True)
                if not self.service.has_time_for_attempt(self.budget, after=start)}
        self._started = dict.fromkeys(late, LATE)
        valid = [(record, request) for record, request in valid if _key(record) not in late]
        # The first record of each lane that starts at once is admitted with the others,
        # in one round trip per limit, while phase 1 writes.
        start_of = {_key(record): start for record, start in zip(records, starts, strict=True)}
        at_once = {n for n, (record, _) in enumerate(valid) if start_of[_key(record)] == 0.0}
        try:
            started = self.service.start_batch([request for _, request in valid], self.budget, admit=at_once)
        except StoreUnavailableError as exc:
            started = [exc] * len(valid)  # each record reports it (handle)
        self._started.update({_key(record): start for (record, _), start in zip(valid, started, strict=True)})
        # The records started later are recorded with these: their requests end by the first safety net.
        self._lease_ends_by = min((s.window.lease_ends_at for s in started if isinstance(s, Started)), default=None)
        # A subscription's last record of the batch gives its permit back on the
        # returns thread (beside phase 3); an earlier one at once, as a later
        # record to the same endpoint may need the place.
        self._last_of_endpoint = set({request.webhook_id: _key(record) for record, request in valid}.values())
        try:
            futures = run_in_lanes(records, self._lane, self.handle, self.service.config.max_in_flight)
            self._outcomes = {_key(record): _result_or_exception(future)
                              for record, future in zip(records, futures, strict=True)}
            self._finish([(record, tried) for record in records
                          if isinstance(tried := self._outcomes[_key(record)], _Tried)])
        finally:
            # The permits' returns ran beside phase 3.
            self.service.finish_returns(s.admitted for s in started if isinstance(s, Started))

    def _finish(self, tried: list[tuple[SQSRecord, _Tried]]) -> None:
        """Phase 3 for every record that made it through phase 2."""
        if not tried:
            return
        try:
            results = self.service.finish_batch([(t.start, t.outcome) for _, t in tried])
        except StoreUnavailableError as exc:
            self.outage = self.outage or exc
            self.log.error("a store is unavailable: the attempted records are sent back with a backoff",
                           extra={"records": len(tried), "reason": str(exc)})
            for record, _ in tried:
                self.stopped_by_outage.append(record)
                self._outcomes[_key(record)] = exc
            return
        for (record, _), result in zip(tried, results, strict=True):
            self._outcomes[_key(record)] = result

    def outcome(self, record: SQSRecord) -> DispatchResult:
        """What ``run`` made of ``record``: its result, or its exception raised."""
        result = self._outcomes[_key(record)]
        if isinstance(result, Exception):
            raise result
        assert isinstance(result, DispatchResult)  # every _Tried was finished by run
        return result

    def _lane(self, record: SQSRecord) -> str:
        """Its subscription under WEBHOOK_SERIAL_PER_SUBSCRIPTION, else a lane of its own
        (as is a malformed record's: it fails alone)."""
        request = self._request(record)
        if self.service.config.serial_per_subscription and not isinstance(request, MalformedMessageError):
            return request.webhook_id
        return record.message_id

    def _request(self, record: SQSRecord) -> DeliveryRequest | MalformedMessageError:
        """The record's message, parsed once (for its lane, then for its delivery)."""
        key = _key(record)
        if key not in self._requests:
            try:
                self._requests[key] = parse_message(record.body)
            except MalformedMessageError as exc:
                self._requests[key] = exc
        return self._requests[key]

    def handle(self, record: SQSRecord) -> DispatchResult | _Tried:
        context = {"message_id": record.message_id}
        if self.outage is not None:
            self.stopped_by_outage.append(record)
            raise StoreUnavailableError("not tried: a store is unavailable in this batch") from self.outage
        try:
            request = self._request(record)
            if isinstance(request, MalformedMessageError):
                raise request
            known = self._started[_key(record)]
            (start,) = self.service.start_batch([request], self.budget, lease_ends_by=self._lease_ends_by) \
                if known is LATE else (known,)
            if isinstance(start, Exception):
                raise start
            assert isinstance(start, Started | DispatchResult)
            return self._try_in_lane(record, start)
        except MalformedMessageError as exc:
            # The reason names the bad field; the body itself is never logged.
            self.log.warning("malformed record rejected", extra={**context, "reason": str(exc)})
            raise
        except DeadlineNearError as exc:
            self.log.info("record not started: too little time left", extra={**context, "reason": str(exc)})
            raise
        except StoreUnavailableError as exc:
            self.outage = exc
            self.stopped_by_outage.append(record)
            self.log.error("a store is unavailable: the rest of the batch is sent back with a backoff",
                           extra={**context, "reason": str(exc)})
            raise

    def _try_in_lane(self, record: SQSRecord, start: Started | DispatchResult) -> DispatchResult | _Tried:
        """Phase 2 of one record, and under WEBHOOK_SERIAL_PER_SUBSCRIPTION keep the
        lane's order when its endpoint holds a record back: every later record of
        the lane is held back behind it (no attempt), instead of overtaking it.
        A lane's records run one after another in one thread, so its entry has one writer."""
        serial = self.service.config.serial_per_subscription
        lane = self._lane(record)
        tried = self.service.try_started(start, self._held_back.get(lane) if serial else None,
                                         later=_key(record) in self._last_of_endpoint)
        if isinstance(tried, DispatchResult):
            return tried
        if serial and tried.outcome == "deferred" and tried.next_attempt_at is not None:
            self._held_back[lane] = tried.next_attempt_at
        assert isinstance(start, Started)  # try_started only tries a Started record
        return _Tried(start, tried)

    def back_off(self, sqs: Any, queue_url: str) -> int:
        """Give every record the outage stopped its backoff visibility timeout.
        Returns how many SQS took; the others come back after the queue's own
        visibility timeout (the backoff is an optimisation, not a guarantee)."""
        from botocore.exceptions import BotoCoreError, ClientError  # boto3 only loads on this path

        changed = 0
        records = self.stopped_by_outage
        for start in range(0, len(records), SQS_BATCH):
            entries = [{"Id": str(n), "ReceiptHandle": r.receipt_handle,
                        "VisibilityTimeout": outage_visibility(int(r.attributes.approximate_receive_count or 1))}
                       for n, r in enumerate(records[start:start + SQS_BATCH])]
            try:
                response = sqs.change_message_visibility_batch(QueueUrl=queue_url, Entries=entries)
            except (BotoCoreError, ClientError) as exc:
                self.log.warning("visibility backoff not set", extra={"error": exc.__class__.__name__})
                continue
            changed += len(response.get("Successful", []))
        return changed


@dataclass(frozen=True)
class _Tried:
    """A record through phase 2: what its attempt came to, not recorded yet."""

    start: Started
    outcome: Outcome


def _result_or_exception(future: Future[DispatchResult | _Tried]) -> DispatchResult | _Tried | Exception:
    exc = future.exception()
    if exc is None:
        return future.result()
    assert isinstance(exc, Exception)  # lanes.py only catches Exception
    return exc


def _key(record: SQSRecord) -> int:
    """The record as the event holds it: the batch processor wraps the same dict again."""
    return id(record.raw_event)
