"""Worker processes for the webhook concurrency tests. Each one sets the Lambda
environment, loads the REAL handler from functions/, opens the handler's own
clients with one round trip each, waits at the barrier, invokes it and writes
what the handler returned (and, for dispatch, what each record came to) to its
own history file."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onceonly_cli.local.lambda_runtime import LambdaContext, close_function_clients, load_handler
from tests.support import REPO_ROOT
from tests.support.functions.events import scheduled_event
from tests.support.functions.function_clients import open_function_clients

if TYPE_CHECKING:
    from collections.abc import Callable

    from onceonly_cli.testing.receiver import ReceivedRequest, WebhookReceiver

def _handler(function: str, env: dict[str, str]) -> Any:
    os.environ.update(env)
    return load_handler(REPO_ROOT / "functions" / function, "app.handler")


def _record_kinds() -> list[str]:
    """Wrap ``DispatchBatch.outcome`` (what the dispatcher made of a record) so that
    this worker learns what each of its records came to: ``attempted`` when its
    INSERT created the delivery, else ``duplicate``; ``raised <error>: <why>``
    when it failed (so that a test's verdict names the cause; ``unavailable``
    first when a store was: the record comes back from SQS)."""
    from onceonly.errors import StoreUnavailableError
    from onceonly_app.webhooks.dispatch_batch import DispatchBatch

    kinds: list[str] = []
    real = DispatchBatch.outcome

    def recording(self: DispatchBatch, record: Any) -> Any:
        try:
            result = real(self, record)
        except Exception as exc:
            transient = "unavailable " if isinstance(exc, StoreUnavailableError) else ""
            kinds.append(f"{transient}raised {exc.__class__.__name__}: {exc} (cause: {exc.__cause__!r})")
            raise
        kinds.append(result.kind)
        return result

    DispatchBatch.outcome = recording  # type: ignore[method-assign]
    return kinds


DISPATCH_RECEIVES = 3  # receives of one message in dispatch_worker (maxReceiveCount is 12)


def dispatch_worker(worker_no: int, barrier: Any, history_path: Path, env: dict[str, str],
                    batches_by_worker: list[list[dict[str, Any]]]) -> None:
    from tests.support.races.race import BARRIER_TIMEOUT, History

    handler = _handler("webhook_dispatch", env)
    kinds = _record_kinds()
    open_function_clients()
    history = History(history_path)
    barrier.wait(BARRIER_TIMEOUT)
    for event in batches_by_worker[worker_no]:
        # As SQS does, a record the batch answer names as failed comes back (a few times here).
        for receive in range(1, 1 + DISPATCH_RECEIVES):
            seen = len(kinds)
            response = handler(event, LambdaContext(function_name="webhook-dispatch", timeout_seconds=60))
            failures = [f["itemIdentifier"] for f in response["batchItemFailures"]]
            history.write(worker=worker_no, receive=receive, records=[r["messageId"] for r in event["Records"]],
                          failures=failures, kinds=kinds[seen:])
            if not failures:
                break
            event = {**event, "Records": [r for r in event["Records"] if r["messageId"] in failures]}
    history.close()
    close_function_clients()


def retry_worker(worker_no: int, barrier: Any, history_path: Path, env: dict[str, str]) -> None:
    from tests.support.races.race import BARRIER_TIMEOUT, History

    handler = _handler("webhook_retry", env)
    open_function_clients()
    history = History(history_path)
    barrier.wait(BARRIER_TIMEOUT)
    summary = handler(scheduled_event("webhook_retry"),
                      LambdaContext(function_name="webhook-retry", timeout_seconds=60))
    history.write(worker=worker_no, pid=os.getpid(), **summary)
    history.close()
    close_function_clients()


def lone_worker(function: str, event: dict[str, Any], history_path: Path, env: dict[str, str]) -> None:
    """One invocation in its own process (to be killed or stopped by the test)."""
    from tests.support.races.race import History

    handler = _handler(function, env)
    history = History(history_path)
    response = handler(event, LambdaContext(function_name=function, timeout_seconds=60))
    history.write(pid=os.getpid(), response=response)
    history.close()
    close_function_clients()


def kill_mid_request(function: str, event: dict[str, Any], history_path: Path, env: dict[str, str],
                     receiver: WebhookReceiver, delivery_id: str, release: threading.Event,
                     timeout: float = 30.0) -> int | None:
    """Run one invocation of ``function`` in its own process and SIGKILL it once
    the receiver has a new request for ``delivery_id`` (held until ``release``
    is set, so the POST is in flight), then release it. Returns the exit code."""
    seen = len(receiver.history(delivery_id))
    return kill_when(function, event, history_path, env, receiver,
                     lambda reqs: sum(r.webhook_id == delivery_id for r in reqs) > seen, release, timeout)


def kill_when(function: str, event: dict[str, Any], history_path: Path, env: dict[str, str],
              receiver: WebhookReceiver, arrived: Callable[[list[ReceivedRequest]], bool],
              release: threading.Event, timeout: float = 30.0) -> int | None:
    """Run one invocation of ``function`` in its own process and SIGKILL it once
    the receiver's requests satisfy ``arrived`` (the held ones are in flight),
    then set ``release``. Returns the exit code."""
    from tests.support.races.race import CTX

    proc = CTX.Process(target=lone_worker, args=(function, event, history_path, env))
    proc.start()
    try:
        assert receiver.wait_for(arrived, timeout=timeout), f"{function}: the awaited requests did not arrive " \
                                                            f"within {timeout:.0f}s"
        os.kill(proc.pid, signal.SIGKILL)  # mid-attempt: the requests are in flight
        proc.join(timeout)
    finally:
        release.set()
        if proc.is_alive():  # the assertion above failed: do not leave it running
            proc.kill()
            proc.join()
    return proc.exitcode
