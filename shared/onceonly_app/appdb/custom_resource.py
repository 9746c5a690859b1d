"""The CloudFormation custom-resource protocol for the schema step: run it on
Create and Update, leave the data alone on Delete, and always answer
CloudFormation (a PUT of the result to the pre-signed ResponseURL), also when
the step fails or the function is about to time out, so a deploy never waits
an hour for an answer that will not come."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import requests

PHYSICAL_ID = "onceonly-schema"
ANSWER_FIELDS = ("ResponseURL", "StackId", "RequestId", "LogicalResourceId")  # what an answer needs
REQUEST_TYPES = ("Create", "Update", "Delete")
ANSWER_MARGIN_SECONDS = 10.0  # answer FAILED this long before the function's own timeout
MAX_REASON = 1000  # CloudFormation shows the reason in the stack events


class InvalidRequestError(ValueError):
    """The event is not a custom-resource request: without its ResponseURL and
    ids there is nobody to answer, so the invocation fails with this."""


def check_request(event: Any) -> None:
    """Raise InvalidRequestError unless ``event`` carries what an answer needs."""
    if not isinstance(event, dict):
        raise InvalidRequestError(f"not a custom-resource request: expected an object, got {type(event).__name__}")
    bad = [name for name in ANSWER_FIELDS if not isinstance(event.get(name), str) or not event[name]]
    if bad:
        raise InvalidRequestError(f"not a custom-resource request: {', '.join(bad)} missing or not a string")
    if not event["ResponseURL"].startswith(("https://", "http://")):
        raise InvalidRequestError("not a custom-resource request: ResponseURL is not an http(s) URL")


class Responder:
    """Sends the one answer CloudFormation expects; later calls do nothing."""

    def __init__(self, event: dict[str, Any], timeout: float = 10.0) -> None:
        self._event = event
        self._timeout = timeout
        self._lock = threading.Lock()
        self.sent: dict[str, Any] | None = None

    def send(self, status: str, reason: str = "", data: dict[str, str] | None = None) -> bool:
        with self._lock:
            if self.sent is not None:
                return False
            event = self._event
            self.sent = {
                "Status": status,
                "Reason": reason[:MAX_REASON] or status,
                "PhysicalResourceId": event.get("PhysicalResourceId") or PHYSICAL_ID,
                "StackId": event["StackId"],
                "RequestId": event["RequestId"],
                "LogicalResourceId": event["LogicalResourceId"],
                "Data": data or {},
            }
            body = json.dumps(self.sent)
            # The pre-signed S3 URL is signed without a content type.
            requests.put(event["ResponseURL"], data=body, timeout=self._timeout,
                         headers={"Content-Type": "", "Content-Length": str(len(body))}).raise_for_status()
            return True


def handle(event: dict[str, Any], seconds_left: Callable[[], float], apply: Callable[[], dict[str, str]],
           log: Any) -> dict[str, Any]:
    """Answer one custom-resource request. ``apply`` runs the schema step and
    returns the resource's attributes; any exception becomes a FAILED answer
    with its first line as the reason, and so does an unknown RequestType
    (without running ``apply``). Raises InvalidRequestError, answering
    nobody, for an event without a ResponseURL and ids."""
    check_request(event)
    responder = Responder(event)
    request = event.get("RequestType")
    if request not in REQUEST_TYPES:
        responder.send("FAILED", f"unknown RequestType {request!r}: expected one of {', '.join(REQUEST_TYPES)}")
        return responder.sent or {}
    if request == "Delete":
        # Deleting the stack keeps the data: the schema is dropped with the database, never here.
        responder.send("SUCCESS", "schema and data are kept on delete")
        return responder.sent or {}
    watchdog = threading.Timer(max(0.0, seconds_left() - ANSWER_MARGIN_SECONDS), _time_out, (responder, log))
    watchdog.daemon = True
    watchdog.start()
    try:
        data = apply()
    except Exception as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        log.error("schema step failed", extra={"request": request, "reason": reason})
        responder.send("FAILED", f"schema step failed: {reason}")
    else:
        log.info("schema applied", extra={"request": request, **data})
        responder.send("SUCCESS", "schema applied", data)
    finally:
        watchdog.cancel()
    return responder.sent or {}


def _time_out(responder: Responder, log: Any) -> None:
    if responder.send("FAILED", "schema step did not finish before the function's timeout (store unreachable?)"):
        log.error("schema step timed out; answered FAILED")
