"""The CloudFormation custom-resource protocol for the schema step, in the
standard library only: it must answer even when the layer cannot load (a
wrong-platform build, a missing layer), so nothing here imports the layer.

- Every request gets one answer, a PUT of JSON to the pre-signed ResponseURL,
  also when the step fails, its code does not load, or the function is about
  to time out (the watchdog answers FAILED before Lambda's timeout).
- A run that was answered FAILED never commits: the migration claims the
  right to commit (``claim_commit``) right before its COMMIT, and the claim
  is refused once an answer is given; a timeout during a claimed COMMIT waits
  for that COMMIT's outcome.
- Delete keeps the data and needs no code: always SUCCESS.
- An Update whose properties are not the function's own configuration is
  CloudFormation's rollback (it sends the old properties while the function
  still runs the new code): SUCCESS without migrating (docs/deploy.md,
  "Rollback"), since migrations only go forward and the newer schema still
  serves the older code."""

from __future__ import annotations

import json
import os
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

PHYSICAL_ID = "onceonly-schema"
ANSWER_FIELDS = ("ResponseURL", "StackId", "RequestId", "LogicalResourceId")  # what an answer needs
REQUEST_TYPES = ("Create", "Update", "Delete")
ANSWER_MARGIN_SECONDS = 10.0  # answer FAILED this long before the function's own timeout
COMMIT_GRACE_SECONDS = 5.0  # a timeout during a claimed COMMIT waits this long for its outcome (< the margin)
# CloudFormation refuses a response body over 4,096 bytes: the reason is capped
# by its bytes in the JSON sent (a non-ASCII character is escaped to 6), the
# rest of the body (ids, attributes) fits in what is left.
MAX_REASON_BYTES = 1500
MAX_RESPONSE_BYTES = 4096
PUT_ATTEMPTS = 3  # the answer is the deploy's only signal: retry a network failure, never a refusal
PUT_TIMEOUT_SECONDS = 10.0

# Each property the template gives SchemaMigration that names what the step
# runs against, and the function's variable that holds the same value. When the
# two differ, the request is for another configuration: a rollback.
CONFIGURATION = {
    "LayerVersion": "ONCEONLY_LAYER_VERSION",
    "DatabaseUrlSecretArn": "DATABASE_URL_SECRET",
    "DatabaseHost": "DATABASE_HOST",
    "DatabaseName": "DATABASE_NAME",
    "DatabaseProxyEndpoint": "DATABASE_PROXY_ENDPOINT",
    "StoreUrlSecretArn": "ONCEONLY_STORE_URL_SECRET",
}
DEPLOYED_MARKER = "ONCEONLY_LAYER_VERSION"  # set by the template only: without it (locally) every request runs


class InvalidRequestError(ValueError):
    """The event is not a custom-resource request: without its ResponseURL and
    ids there is nobody to answer, so the invocation fails with this."""


class AnswerGivenError(RuntimeError):
    """The request was already answered (FAILED by the watchdog): this run must not commit."""


def check_request(event: Any) -> None:
    """Raise InvalidRequestError unless ``event`` carries what an answer needs."""
    if not isinstance(event, dict):
        raise InvalidRequestError(f"not a custom-resource request: expected an object, got {type(event).__name__}")
    bad = [name for name in ANSWER_FIELDS if not isinstance(event.get(name), str) or not event[name]]
    if bad:
        raise InvalidRequestError(f"not a custom-resource request: {', '.join(bad)} missing or not a string")
    if not event["ResponseURL"].startswith(("https://", "http://")):
        raise InvalidRequestError("not a custom-resource request: ResponseURL is not an http(s) URL")


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class Responder:
    """Sends the one answer CloudFormation gets (later calls do nothing), and
    guards the commit: ``claim_commit`` succeeds only while no answer is given
    and the deadline has not passed; after a claim, ``time_out`` waits for the
    claimed run's own answer before it answers FAILED."""

    def __init__(self, event: dict[str, Any], deadline: float = float("inf")) -> None:
        self._event = event
        self._deadline = deadline  # time.monotonic() at which the watchdog answers
        self._changed = threading.Condition()
        self._commit_claimed = False
        self.sent: dict[str, Any] | None = None

    @property
    def stack_id(self) -> str | None:
        """The requesting stack's id (the database is set up for one stack at a time)."""
        return self._event.get("StackId")

    def seconds_left(self) -> float:
        """Until the answer is due: no statement of the run should last longer."""
        return self._deadline - time.monotonic()

    def claim_commit(self) -> None:
        """Raise AnswerGivenError unless this run may still commit."""
        with self._changed:
            if self.sent is not None:
                raise AnswerGivenError(f"already answered {self.sent['Status']}: not committing")
            if self.seconds_left() <= 0:
                raise AnswerGivenError("the answer is due (the watchdog answers FAILED): not committing")
            self._commit_claimed = True

    def send(self, status: str, reason: str = "", data: dict[str, str] | None = None) -> bool:
        with self._changed:
            if self.sent is not None:
                return False
            event = self._event
            self.sent = {
                "Status": status,
                "Reason": capped(reason, MAX_REASON_BYTES) or status,
                "PhysicalResourceId": event.get("PhysicalResourceId") or PHYSICAL_ID,
                "StackId": event["StackId"],
                "RequestId": event["RequestId"],
                "LogicalResourceId": event["LogicalResourceId"],
                "Data": data or {},
            }
            self._changed.notify_all()
            body = json.dumps(self.sent).encode()
            if len(body) > MAX_RESPONSE_BYTES:  # attributes too long for CloudFormation: the status still goes
                self.sent["Data"] = {}
                body = json.dumps(self.sent).encode()
            _put(event["ResponseURL"], body)
            return True

    def time_out(self, reason: str) -> bool:
        """The watchdog's FAILED answer; after a commit claim, only once that
        COMMIT had COMMIT_GRACE_SECONDS to answer for itself."""
        with self._changed:
            if self._commit_claimed:
                self._changed.wait_for(lambda: self.sent is not None, COMMIT_GRACE_SECONDS)
                reason = "the schema step's COMMIT did not return in time; its outcome is unknown (the next " \
                         "deploy or `onceonly migrate` applies whatever is missing)"
            return self.send("FAILED", reason)


def capped(text: str, limit: int) -> str:
    """The longest prefix of ``text`` whose JSON encoding (as json.dumps
    writes it, ASCII-escaped) takes at most ``limit`` bytes, quotes excluded."""
    cost = 0
    for index, char in enumerate(text):
        cost += len(json.dumps(char)) - 2
        if cost > limit:
            return text[:index]
    return text


def _put(url: str, body: bytes) -> None:
    # The pre-signed S3 URL is signed without a content type: send an empty one
    # (urllib would add application/x-www-form-urlencoded).
    request = urllib.request.Request(url, data=body, method="PUT",
                                     headers={"Content-Type": "", "Content-Length": str(len(body))})
    for attempt in range(1, PUT_ATTEMPTS + 1):
        try:
            with urllib.request.urlopen(request, timeout=PUT_TIMEOUT_SECONDS) as response:  # noqa: S310 - http(s) checked
                response.read()
            return
        except urllib.error.HTTPError as exc:
            if exc.code < 500 or attempt == PUT_ATTEMPTS:
                raise
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ssl.SSLCertVerificationError) or attempt == PUT_ATTEMPTS:
                raise
        time.sleep(attempt)


def rollback_of(event: dict[str, Any], environ: dict[str, str] | os._Environ[str]) -> list[str]:
    """The properties of an Update that differ from the function's own
    configuration (empty: the request is for this code and this target)."""
    if event.get("RequestType") != "Update" or not environ.get(DEPLOYED_MARKER):
        return []
    properties = event.get("ResourceProperties")
    properties = properties if isinstance(properties, dict) else {}
    return [name for name, variable in CONFIGURATION.items()
            if str(properties.get(name) or "") != environ.get(variable, "")]


Step = Callable[[Responder], dict[str, str]]


def handle(event: Any, seconds_left: Callable[[], float], load: Callable[[], tuple[Step, Any]]) -> dict[str, Any]:
    """Answer one custom-resource request. ``load`` imports the schema step
    and returns (the step, a logger); it runs only for a Create or an Update
    for this configuration, and its failure is a FAILED answer with the
    reason. The step gets the Responder (for ``claim_commit`` and
    ``seconds_left``) and returns the resource's attributes; its exception is
    a FAILED answer with its first line as the reason, and so is an unknown
    RequestType. Raises InvalidRequestError, answering nobody, for an event
    without a ResponseURL and ids."""
    check_request(event)
    budget = max(0.0, seconds_left() - ANSWER_MARGIN_SECONDS)
    responder = Responder(event, time.monotonic() + budget)
    request = event.get("RequestType")
    if request not in REQUEST_TYPES:
        responder.send("FAILED", f"unknown RequestType {request!r}: expected one of {', '.join(REQUEST_TYPES)}")
        return responder.sent or {}
    if request == "Delete":
        # Deleting the stack keeps the data: the schema is dropped with the database, never here.
        responder.send("SUCCESS", "schema and data are kept on delete")
        return responder.sent or {}
    differing = rollback_of(event, os.environ)
    if differing:
        _log("INFO", "rollback: schema step skipped", differing=differing)
        responder.send("SUCCESS", "rollback (the request names another " + ", ".join(differing) + " than the "
                       "function runs with): the schema is left as it is; migrations are additive, so the previous "
                       "code runs on it", {"MigrationsApplied": "none"})
        return responder.sent or {}
    watchdog = threading.Timer(budget, responder.time_out, (timeout_reason(budget),))
    watchdog.daemon = True
    watchdog.start()
    try:
        try:
            step, log = load()
        except Exception as exc:  # a wrong-platform build or a missing layer: say so instead of never answering
            reason = f"the schema step's code did not load ({type(exc).__name__}: {first_line(exc)}); check the " \
                     "layer's build (docs/deploy.md, `sam build` requirements)"
            _log("ERROR", reason)
            responder.send("FAILED", reason)
            return responder.sent or {}
        try:
            data = step(responder)
        except Exception as exc:
            reason = first_line(exc)
            log.error("schema step failed", extra={"request": request, "reason": reason})
            responder.send("FAILED", f"schema step failed: {reason}")
        else:
            log.info("schema applied", extra={"request": request, **data})
            responder.send("SUCCESS", "schema applied", data)
    finally:
        watchdog.cancel()
    return responder.sent or {}


def timeout_reason(budget: float) -> str:
    """The watchdog's reason: which timeout ran out, and what to do about a
    migration that needs longer than any deploy gives it."""
    return (f"the schema step did not finish within {budget:.0f} s (the function's timeout less "
            f"{ANSWER_MARGIN_SECONDS:g} s to answer); nothing was committed. A migration that needs longer cannot "
            "run inside a deploy: run `onceonly migrate --database URL --store URL` before `sam deploy` "
            "(docs/deploy.md, \"Long migrations\"). Otherwise the database or store was unreachable, or a long "
            "transaction held a lock")


def _log(level: str, message: str, **fields: Any) -> None:
    """One structured line without Powertools (which may be what failed to load)."""
    print(json.dumps({"level": level, "service": "schema-migration", "message": message, **fields}), flush=True)
