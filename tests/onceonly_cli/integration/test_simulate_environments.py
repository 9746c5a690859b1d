"""simulate's execution environments: as on Lambda, each function has its own
(a slow invocation of one never delays another function's), each imports its
own handler only, a function's environment starts on its first invocation,
and an idle started one is reused before another starts. Real environment
processes, with handlers written here."""

from __future__ import annotations

import json
import os
import queue
import random
import threading
import time
from pathlib import Path
from typing import Any

from onceonly_cli.simulate.replica import FUNCTIONS_VAR
from onceonly_cli.simulate.replicas import FunctionPools, Invocation, InvocationResult

HANDLER = '''
import os, sys, time

def handler(event, context):
    time.sleep(event["sleep"])
    return {"pid": os.getpid(), "handlers": sorted(m for m in sys.modules if m.startswith("_lambda_"))}
'''


def pools(tmp_path: Path, count: int = 1) -> FunctionPools:
    functions = []
    for name in ("Slow", "Fast"):
        code = tmp_path / name.lower()
        code.mkdir()
        (code / "app.py").write_text(HANDLER, encoding="utf-8")
        functions.append({"logical_id": name, "code_dir": str(code), "handler": "app.handler", "timeout": 30})
    env = {**os.environ, FUNCTIONS_VAR: json.dumps(functions)}
    return FunctionPools(count, env, tmp_path, crash_rate=0.0, rng=random.Random(1),
                         timeouts={"Slow": 30.0, "Fast": 30.0}, warm="Fast")


def invoke(pool: FunctionPools, function: str, sleep: float, results: dict[str, InvocationResult],
           done: threading.Event) -> None:
    def finished(result: InvocationResult) -> None:
        results[function] = result
        if len(results) == 2:
            done.set()

    pool.submit(Invocation(function, {"sleep": sleep}, finished))


def test_each_function_has_its_own_environments_started_on_first_use(tmp_path: Path) -> None:
    pool = pools(tmp_path)
    pool.start()
    try:
        assert (tmp_path / "Fast-0.log").exists() and not (tmp_path / "Slow-0.log").exists(), \
            "only the warm function's environment starts before the run"
        results: dict[str, InvocationResult] = {}
        done = threading.Event()
        invoke(pool, "Slow", 2.0, results, done)
        time.sleep(0.5)  # the slow invocation is running (its cold start is inside it)
        invoke(pool, "Fast", 0.0, results, done)
        assert done.wait(60), results
    finally:
        pool.stop()
    slow, fast = results["Slow"], results["Fast"]
    assert slow.ok and fast.ok, (slow.error, fast.error)
    assert fast.finished < slow.finished, "the fast function waited for the slow one's environment"
    responses: list[dict[str, Any]] = [slow.response, fast.response]
    assert responses[0]["pid"] != responses[1]["pid"]
    assert responses[0]["handlers"] == ["_lambda_slow_app"] and responses[1]["handlers"] == ["_lambda_fast_app"]
    assert pool.restarts == 0 and pool.kills == 0  # a cold start is not a restart


def test_an_idle_started_environment_is_reused_before_another_starts(tmp_path: Path) -> None:
    pool = pools(tmp_path, count=2)
    pool.start()
    pids = []
    results: queue.SimpleQueue[InvocationResult] = queue.SimpleQueue()
    try:
        for _ in range(6):  # one after another: never two at once
            pool.submit(Invocation("Slow", {"sleep": 0.0}, results.put))
            result = results.get(timeout=60)
            assert result.ok, result.error
            pids.append(result.response["pid"])
    finally:
        pool.stop()
    assert len(set(pids)) == 1, f"a second environment was started while the first was idle: {pids}"
    assert len(list(tmp_path.glob("Slow-*.log"))) == 1, "a second environment was started"
