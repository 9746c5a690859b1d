"""Run a Lambda handler in this process the way the Python runtime would:
its code folder first on sys.path (the layer's packages are importable from
the installed project), and a context object with a real deadline."""

from __future__ import annotations

import importlib.util
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Handler = Callable[[Any, Any], Any]


@dataclass
class LambdaContext:
    """The attributes and method of the runtime's context object that handlers use."""

    function_name: str
    timeout_seconds: float = 60.0
    memory_limit_in_mb: int = 256
    function_version: str = "$LATEST"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = ""
    log_stream_name: str = ""
    _deadline: float = 0.0

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + self.timeout_seconds
        self.log_group_name = self.log_group_name or f"/aws/lambda/{self.function_name}"
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:000000000000:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def load_handler(code_dir: Path, handler: str) -> Handler:
    """Import ``module.function`` (the template's Handler) from ``code_dir``.
    Each function's module gets a unique name so that two functions' ``app.py``
    can be loaded in one process."""
    module_name, _, function_name = handler.rpartition(".")
    if not module_name or not function_name:
        raise ValueError(f"handler must look like module.function, got {handler!r}")
    path = Path(code_dir) / (module_name.replace(".", "/") + ".py")
    if not path.exists():
        raise FileNotFoundError(f"handler module {path} does not exist")
    unique_name = f"_lambda_{Path(code_dir).name}_{module_name.replace('.', '_')}"
    spec = importlib.util.spec_from_file_location(unique_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(code_dir))
    try:
        sys.modules[unique_name] = module
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(code_dir))
    fn = getattr(module, function_name, None)
    if not callable(fn):
        raise AttributeError(f"{path} has no callable {function_name!r}")
    return fn  # type: ignore[no-any-return]


def close_function_clients() -> None:
    """The container's shutdown: close the clients the reference app's handlers
    built at module scope (its database pool and coordination store). A process
    that ran handlers calls this before it exits: on Python 3.13 an unclosed
    psycopg pool's worker threads can hang interpreter shutdown."""
    if "onceonly_app.db.clients" in sys.modules:  # no handler ran: nothing was built
        sys.modules["onceonly_app.db.clients"].reset()
