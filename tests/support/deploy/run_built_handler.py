"""Run the BUILT SchemaMigrationFunction once, the way Lambda would: its code
folder and the layer's python/ folder (``sam build`` output) first on
sys.path, a context with a real deadline. Faults come from here, never from
the deployed tree:

    python3.13 run_built_handler.py FUNCTION_DIR LAYER_DIR TIMEOUT_S EVENT_JSON
        [--break MODULE]...   importing MODULE fails (as a wrong-platform build's psycopg does)
        [--migrations DIR]    the layer ships the migrations in DIR (an upgrade, a bad one)

Prints the handler's return value as JSON on stdout, and the wall-clock time
of the function's timeout as the first line of stderr."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


class Context:
    def __init__(self, timeout: float) -> None:
        self._deadline = time.monotonic() + timeout

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("function_dir")
    parser.add_argument("layer_dir")
    parser.add_argument("timeout", type=float)
    parser.add_argument("event")
    parser.add_argument("--break", dest="broken", action="append", default=[])
    parser.add_argument("--migrations")
    args = parser.parse_args()
    sys.path[0:1] = [args.function_dir, args.layer_dir]  # not this folder: only what Lambda would see
    for module in args.broken:
        sys.modules[module] = None  # type: ignore[assignment]  # "import MODULE" now raises ImportError
    if args.migrations:
        from onceonly_app.db import migrate

        migrate.MIGRATIONS_DIR = Path(args.migrations)
    context = Context(args.timeout)
    # when the function would time out, for a test that needs to know when the watchdog answers
    print(json.dumps({"timeout_at": time.time() + args.timeout}), file=sys.stderr, flush=True)
    import app  # the handler module, loaded as the runtime loads it

    print(json.dumps(app.handler(json.loads(args.event), context)))


if __name__ == "__main__":
    main()
