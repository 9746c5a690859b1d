"""The handlers' tracer: Powertools Tracer when the template turns tracing on,
else a stand-in that only passes the handler through. Building a Tracer
imports the X-Ray SDK, and botocore with it, even with
POWERTOOLS_TRACE_DISABLED=true: most of a handler's cold import, for
nothing, on every stack that does not trace (the default)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .settings import flag

TRACE_DISABLED = "POWERTOOLS_TRACE_DISABLED"  # the template sets it from the Tracing parameter


class _Untraced:
    """What the handlers use of Tracer, doing nothing."""

    def capture_lambda_handler(self, handler: Callable[..., Any] | None = None,
                               **_: Any) -> Callable[..., Any]:
        return handler if handler is not None else (lambda wrapped: wrapped)


def handler_tracer(service: str) -> Any:
    """A Powertools Tracer for ``service``, or the stand-in when tracing is off."""
    if flag(os.environ, TRACE_DISABLED, False):
        return _Untraced()
    from aws_lambda_powertools import Tracer

    return Tracer(service=service)
