"""PermitReturns: permits given back on a thread of its own, those waiting
together in one return_permits call; wait() sees every one through, a store
error loses no wait, and an idle thread ends and comes back on the next put."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from onceonly import Permit
from onceonly.errors import StoreUnavailableError
from onceonly_app.webhooks import endpoint_limits
from onceonly_app.webhooks.endpoint_limits import PermitReturns


class SlowStore:
    """Records each return_permits call; the first one waits for ``go``."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.go = threading.Event()
        self.fail = fail

    def return_permits(self, permits: Sequence[Permit]) -> list[bool]:
        self.go.wait(5)
        self.calls.append([p.holder for p in permits])
        if self.fail:
            raise StoreUnavailableError("down")
        return [True] * len(permits)


def permit(n: int) -> Permit:
    return Permit(name="endpoint:x", holder=f"h{n}", expires_at=time.time() + 30)


def test_the_waiting_permits_go_back_together_and_wait_sees_them_through() -> None:
    store = SlowStore()
    returns = PermitReturns(store)  # type: ignore[arg-type]
    returns.put(permit(0))  # taken by the thread, which then waits for go
    time.sleep(0.1)
    for n in range(1, 5):
        returns.put(permit(n))
    waited = threading.Thread(target=returns.wait)
    waited.start()
    time.sleep(0.1)
    assert waited.is_alive(), "wait() returned before the permits went back"
    store.go.set()
    waited.join(5)
    assert not waited.is_alive()
    assert store.calls == [["h0"], ["h1", "h2", "h3", "h4"]]


def test_a_store_error_is_logged_and_wait_still_returns(caplog: pytest.LogCaptureFixture) -> None:
    store = SlowStore(fail=True)
    store.go.set()
    returns = PermitReturns(store)  # type: ignore[arg-type]
    returns.put(permit(0))
    returns.wait()
    assert store.calls == [["h0"]]
    assert "not returned" in caplog.text


def test_an_idle_thread_ends_and_the_next_put_starts_another(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(endpoint_limits, "RETURNS_IDLE", 0.5)
    store = SlowStore()
    store.go.set()
    returns = PermitReturns(store)  # type: ignore[arg-type]

    def threads() -> set[Any]:
        return {t for t in threading.enumerate() if t.name == "permit-returns" and t.is_alive()}

    before = threads()
    returns.put(permit(0))
    returns.wait()
    (first,) = threads() - before
    first.join(5)
    assert not first.is_alive(), "the idle thread did not end"
    returns.put(permit(1))
    returns.wait()
    (second,) = threads() - before
    assert second is not first
    assert store.calls == [["h0"], ["h1"]]
