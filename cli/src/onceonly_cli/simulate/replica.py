"""One replica: a process holding every function's real handler, warm, like a
Lambda container that serves one invocation at a time.

Protocol (JSON lines on the socket passed as fd ``--fd``): the replica sends
``{"ready": pid}`` once its handlers are imported, then answers each request
``{"id", "function", "event"}`` with ``{"id", "ok", "response"|"error",
"started", "finished", "metrics"}``. stdout/stderr go to a log file; EMF metrics
printed by Powertools are summed per invocation and sent back.

Env: ONCEONLY_SIMULATE_FUNCTIONS is a JSON list of {"logical_id", "code_dir",
"handler", "timeout"}; the stores' env vars are already set by the parent. The
billing jobs run unscoped, over every tenant, as deployed: the run's database
is its own (run_scope.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from ..local.lambda_runtime import LambdaContext, close_function_clients, load_handler
from ..testing.breakage import install_if_requested
from .metrics_capture import MetricsCapturingStdout

FUNCTIONS_VAR = "ONCEONLY_SIMULATE_FUNCTIONS"


def _load_functions() -> dict[str, tuple[Any, float]]:
    handlers: dict[str, tuple[Any, float]] = {}
    for spec in json.loads(os.environ[FUNCTIONS_VAR]):
        handler = load_handler(Path(spec["code_dir"]), spec["handler"])
        handlers[spec["logical_id"]] = (handler, float(spec["timeout"]))
    return handlers


def _invoke(handlers: dict[str, tuple[Any, float]], request: dict[str, Any],
            capture: MetricsCapturingStdout) -> dict[str, Any]:
    handler, timeout = handlers[request["function"]]
    context = LambdaContext(request["function"], timeout_seconds=timeout)
    reply: dict[str, Any] = {"id": request["id"], "started": time.time()}
    try:
        reply["response"] = handler(request["event"], context)
        reply["ok"] = True
    except Exception as exc:  # noqa: BLE001 - an invocation error, reported like Lambda does
        traceback.print_exc()
        reply["ok"] = False
        reply["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    reply["finished"] = time.time()
    sys.stdout.flush()
    reply["metrics"] = capture.take()
    return reply


def serve(sock: socket.socket, log_path: Path) -> None:
    log = open(log_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    capture = MetricsCapturingStdout(log)
    sys.stdout = capture  # type: ignore[assignment]
    sys.stderr = log
    install_if_requested()
    handlers = _load_functions()
    reader = sock.makefile("r", encoding="utf-8")
    writer = sock.makefile("w", encoding="utf-8")
    writer.write(json.dumps({"ready": os.getpid()}) + "\n")
    writer.flush()
    for line in reader:
        reply = _invoke(handlers, json.loads(line), capture)
        writer.write(json.dumps(reply, default=str) + "\n")
        writer.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description="internal: one simulate replica")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--log", type=Path, required=True)
    args = parser.parse_args()
    sock = socket.socket(fileno=args.fd)
    # The parent went away or stopped us: nothing left to answer.
    try:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, KeyboardInterrupt):
            serve(sock, args.log)
    finally:
        close_function_clients()


if __name__ == "__main__":
    main()
