"""A store wrapper that writes every call into a history (onceonly_cli.testing.history):
an ``invoke`` line before the call, then ``ok`` (granted / accepted), ``fail``
(refused) or ``fail`` with an error (outcome unknown). A process killed inside
a call leaves only the ``invoke``: the history shows where it died.

The layer's own code (``onceonly.scheduled``) runs on the wrapper unchanged,
so its acquire/renew/complete calls are recorded too."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onceonly import Claim, Lease, LeaseLostError, Queue, QueueDepth, Store
from onceonly_cli.testing.history import HistoryWriter, Op


def _guard(op: Op, call: Any) -> Any:
    try:
        return call()
    except LeaseLostError:
        op.fail(reason="lease lost")
        raise
    except Exception as exc:
        op.error(exc)
        raise


def _fenced(history: HistoryWriter, what: str, name: str, token: int, call: Any) -> bool:
    """A write under a token: ok if the store accepted it, fail if it refused."""
    op = history.invoke(what, name, token)
    done = bool(_guard(op, call))
    op.ok() if done else op.fail()
    return done


class RecordedStore:
    def __init__(self, store: Store, history: HistoryWriter) -> None:
        self.inner, self.history = store, history

    def setup(self) -> None:
        self.inner.setup()

    def acquire(self, name: str, ttl: float = 30.0) -> Lease | None:
        op = self.history.invoke("acquire", name, ttl=ttl)
        lease = _guard(op, lambda: self.inner.acquire(name, ttl))
        op.ok(token=lease.token) if lease is not None else op.fail()
        return lease  # type: ignore[no-any-return]

    def renew(self, lease: Lease, ttl: float = 30.0) -> Lease:
        op = self.history.invoke("renew", lease.name, lease.token, ttl=ttl)
        renewed = _guard(op, lambda: self.inner.renew(lease, ttl))
        op.ok()
        return renewed  # type: ignore[no-any-return]

    def release(self, lease: Lease) -> bool:
        return _fenced(self.history, "release", lease.name, lease.token, lambda: self.inner.release(lease))

    def complete(self, lease: Lease, keep: float = 86400.0, *, expire: bool = False) -> bool:
        return _fenced(self.history, "complete", lease.name, lease.token,
                       lambda: self.inner.complete(lease, keep, expire=expire))

    def inspect(self, name: str) -> Any:
        return self.inner.inspect(name)

    def queue(self, name: str) -> RecordedQueue:
        return RecordedQueue(self.inner.queue(name), self.history)

    def close(self) -> None:
        self.inner.close()


class RecordedQueue:
    def __init__(self, queue: Queue, history: HistoryWriter) -> None:
        self.inner, self.history, self.name = queue, history, queue.name

    def put(self, item_id: str, due_at: float | None = None, payload: Any = None) -> None:
        op = self.history.invoke("put", item_id)
        _guard(op, lambda: self.inner.put(item_id, due_at, payload))
        op.ok()

    def cancel(self, item_id: str) -> bool:
        op = self.history.invoke("cancel", item_id)
        done = bool(_guard(op, lambda: self.inner.cancel(item_id)))
        op.ok() if done else op.fail()
        return done

    def claim(self, limit: int = 25, lease: float = 60.0) -> list[Claim]:
        op = self.history.invoke("claim", self.name, lease=lease)
        claims: list[Claim] = _guard(op, lambda: self.inner.claim(limit, lease))
        for claim in claims:
            op.ok(name=claim.item_id, token=claim.token, attempt=claim.attempt)
        if not claims:
            op.fail()
        return claims

    def ack(self, claim: Claim) -> bool:
        return _fenced(self.history, "ack", claim.item_id, claim.token, lambda: self.inner.ack(claim))

    def ack_many(self, claims: Sequence[Claim]) -> list[bool]:
        ops = [self.history.invoke("ack", claim.item_id, claim.token) for claim in claims]
        try:
            results = self.inner.ack_many(claims)
        except Exception as exc:
            for op in ops:
                op.error(exc)
            raise
        for op, done in zip(ops, results, strict=True):
            op.ok() if done else op.fail()
        return results

    def retry(self, claim: Claim, due_at: float) -> bool:
        return _fenced(self.history, "retry", claim.item_id, claim.token, lambda: self.inner.retry(claim, due_at))

    def depth(self) -> QueueDepth:
        return self.inner.depth()
