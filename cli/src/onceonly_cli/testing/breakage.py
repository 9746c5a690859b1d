"""TEST-ONLY: a deliberately broken coordination store, to prove that simulate's
invariant checks can fail. Never used unless ONCEONLY_SIMULATE_BREAK_ATOMICITY=1
is set in a replica's environment; the layer itself is untouched.

The wrapper makes grants non-atomic the way hand-rolled coordination usually is:
``acquire`` reads, then grants even when the name is held (check-then-set that
lost its check), and queue ``claim`` loses the lease it wrote on an item's first
grant (read-then-write in two steps), so a concurrent worker takes it too."""

from __future__ import annotations

import os
import secrets
import time
from typing import Any

BREAK_VAR = "ONCEONLY_SIMULATE_BREAK_ATOMICITY"


class NonAtomicQueue:
    def __init__(self, queue: Any) -> None:
        self._queue = queue
        self.name = queue.name

    def claim(self, limit: int = 25, lease: float = 60.0) -> Any:
        claims = self._queue.claim(limit, lease)
        for claim in claims:
            if claim.attempt == 1:  # only once per item, so the run still ends
                self._queue.put(claim.item_id, payload=claim.payload)
        return claims

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


class NonAtomicStore:
    def __init__(self, store: Any) -> None:
        self._store = store

    def acquire(self, name: str, ttl: float = 30.0) -> Any:
        from onceonly import Lease

        granted = self._store.acquire(name, ttl)
        if granted is not None:
            return granted
        # The broken part: the name is held or completed, and we grant it anyway.
        state = self._store.inspect(name)
        token = state.token if state is not None else 0
        return Lease(name=name, owner=secrets.token_hex(8), token=token, expires_at=time.time() + ttl)

    def queue(self, name: str) -> NonAtomicQueue:
        return NonAtomicQueue(self._store.queue(name))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def install_if_requested() -> bool:
    """Wrap every store that ``onceonly.connect`` returns in this process."""
    if os.environ.get(BREAK_VAR) != "1":
        return False
    import onceonly

    real_connect = onceonly.connect

    def broken_connect(url: str) -> Any:
        return NonAtomicStore(real_connect(url))

    onceonly.connect = broken_connect  # type: ignore[assignment]
    return True
