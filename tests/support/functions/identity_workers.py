"""A worker of the store-identity race (spawned: importable at module level):
it connects (one real round trip) before the start line, then asks for the
store's identity and records which instance it got, and when it asked."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import onceonly
from onceonly_app.db.store_identity import identify
from tests.support.races.race import PING, History


def identify_after_start_line(n: int, barrier: Any, history_path: Path, store_url: str) -> None:
    store = onceonly.connect(store_url)
    try:
        store.inspect(PING)  # connected before the race
        barrier.wait(timeout=60)
        started = time.time()
        identity = identify(store, store_url)
        History(history_path).write(worker=n, instance=identity.instance, started=started, ended=time.time())
    finally:
        store.close()
