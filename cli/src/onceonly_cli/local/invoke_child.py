"""The child side of `onceonly invoke`: one Lambda invocation in a fresh process.

Usage (internal): python -m onceonly_cli.local.invoke_child CODE_DIR HANDLER FUNCTION TIMEOUT MEMORY EVENT RESULT

The handler's prints and logs go to stderr (as in ``sam local invoke``); the
response, or a Lambda-style error object, is written to the RESULT file.
Exit codes: 0 ok, 1 the handler raised, 2 the handler could not be loaded.
Its stdin is a pipe the parent holds open: at EOF (the parent died, SIGKILL
included) the invocation ends at once, as a container ends with its host.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback
from pathlib import Path

from .lambda_runtime import LambdaContext, close_function_clients, load_handler


def _error_object(exc: BaseException) -> dict[str, object]:
    return {
        "errorMessage": str(exc),
        "errorType": type(exc).__name__,
        "stackTrace": traceback.format_tb(exc.__traceback__),
    }


PARENT_GONE = 137  # as if SIGKILLed with the parent


def _end_with_parent() -> None:
    def watch() -> None:
        # The parent never writes: the read returns b"" when it is gone. A raw
        # read, not sys.stdin's: a buffered one would block interpreter shutdown.
        while os.read(0, 1):
            pass
        os._exit(PARENT_GONE)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main(argv: list[str]) -> int:
    _end_with_parent()
    try:
        return _invoke(argv)
    finally:
        close_function_clients()  # the container's shutdown: an unclosed pool can hang exit on 3.13


def _invoke(argv: list[str]) -> int:
    code_dir, handler_name, function_name, timeout, memory, event_path, result_path = argv
    result = Path(result_path)
    # Whatever the handler prints is log output, not the response.
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    event = json.loads(Path(event_path).read_text(encoding="utf-8"))
    try:
        handler = load_handler(Path(code_dir), handler_name)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as the invocation's error
        result.write_text(json.dumps(_error_object(exc)), encoding="utf-8")
        return 2
    context = LambdaContext(function_name, timeout_seconds=float(timeout), memory_limit_in_mb=int(memory))
    try:
        response = handler(event, context)
    except Exception as exc:  # noqa: BLE001 - the Lambda runtime reports it the same way
        traceback.print_exc()
        result.write_text(json.dumps(_error_object(exc)), encoding="utf-8")
        return 1
    result.write_text(json.dumps(response, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
