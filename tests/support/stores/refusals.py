"""Waiting for a store to see a fixed configuration: a refused store ends its
refused state once a background connect gets through."""

from __future__ import annotations

import time

import onceonly


def set_up_once_seen(store: onceonly.Store, within: float, *, poll: float = 0.05) -> None:
    """``store.setup()``, called until it is no longer refused; fails the test
    if it still is after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        try:
            store.setup()
            return
        except onceonly.StoreRefusedError:
            assert time.monotonic() < deadline, "the fixed configuration was never seen"
            time.sleep(poll)
