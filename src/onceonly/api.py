"""Backend-neutral types: what a store grants and the protocols every backend meets.

Contention is a normal result (``None`` or an empty list); losing a lease is an
error (:class:`~onceonly.errors.LeaseLostError`) where the caller asked to keep it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Lease:
    """A granted lease. ``token`` strictly increases across every grant of ``name``:
    pass it to your own writes (``... WHERE fence_token < %(token)s``) to fence them."""

    name: str
    owner: str
    token: int
    expires_at: float  # epoch seconds, by the store's clock
    # How many times the name was granted, this grant included (1: the first),
    # where the store counts grants apart from the token (Redis, whose tokens
    # are floored by its clock); None where the token is that count.
    grants: int | None = None

    @property
    def grant_number(self) -> int:
        """1 for the first grant of the name, 2 for the next one, and so on."""
        return self.token if self.grants is None else self.grants


@dataclass(frozen=True)
class Permit:
    """One place of a counting semaphore (:meth:`Store.take_permit`), held by
    ``holder`` (a random id per grant) until ``expires_at`` unless returned first."""

    name: str
    holder: str
    expires_at: float  # epoch seconds, by the store's clock


@dataclass(frozen=True)
class Claim:
    """A claimed queue item. ``attempt`` counts every grant of the item (1 on the
    first claim); ``token`` strictly increases across grants of the same item."""

    queue: str
    item_id: str
    payload: Any
    token: int
    attempt: int
    owner: str
    lease_expires_at: float  # epoch seconds, by the store's clock


class ClaimBatch(list[Claim]):
    """What :meth:`Queue.claim` returns: the claims (a plain list of them), and
    ``acked``: for each claim passed as ``acks=``, in the order given, whether it
    was acked, exactly as :meth:`Queue.ack_many` would report it (False: the
    item had been re-granted, rescheduled or already acked)."""

    def __init__(self, claims: Iterable[Claim] = (), acked: Iterable[bool] = ()) -> None:
        super().__init__(claims)
        self.acked: list[bool] = list(acked)


@dataclass(frozen=True)
class QueueDepth:
    due: int  # claimable now (including items whose lease expired)
    scheduled: int  # waiting for their due time
    in_flight: int  # claimed, lease still running

    @property
    def total(self) -> int:
        return self.due + self.scheduled + self.in_flight


@runtime_checkable
class Queue(Protocol):
    """A due queue: delayed work, claimed atomically in batches, with leases."""

    name: str

    def put(self, item_id: str, due_at: float | None = None, payload: Any = None) -> None:
        """Schedule (or reschedule) ``item_id`` for ``due_at`` (epoch seconds, default now).
        Rescheduling an item that is in flight takes it from its holder: the holder's
        ack/retry are then refused."""

    def put_many(self, items: Iterable[tuple[str, float | None, Any]]) -> int:
        """:meth:`put` for each ``(item_id, due_at, payload)``, in one round trip per
        batch where the store allows it. Every item is checked before anything is
        written (a bad one raises ConfigError naming ``items[i]``). An id listed
        twice is put twice: the later entry wins, as with put in order. Returns the
        number of entries put. Not atomic as a whole: after a store error some
        items may be written; put is idempotent, so retry the call."""

    def put_if_absent(self, items: Iterable[tuple[str, float | None, Any]]) -> list[bool]:
        """Put each ``(item_id, due_at, payload)`` only if the queue holds no item
        of that id, whatever its state (waiting, due or claimed): an item a
        worker holds is never rescheduled or taken from it. Whether each entry
        was put, in the order given (an id listed twice: only its first entry
        can be). Checked like put_many; each item's check-and-put is atomic,
        the call as a whole is not (retry it: it is idempotent)."""

    def cancel(self, item_id: str) -> bool:
        """Remove the item whatever its state. False if it was not there."""

    def cancel_many(self, item_ids: Sequence[str]) -> list[bool]:
        """:meth:`cancel` for each id, in one round trip where the store allows it;
        whether each was there, in the order given (an id listed twice: only its
        first entry can be). Every id is checked before anything is removed."""

    def claim(self, limit: int = 25, lease: float = 60.0, *, acks: Sequence[Claim] = ()) -> ClaimBatch:
        """Atomically take up to ``limit`` items that are due or whose lease expired.
        Concurrent callers always get disjoint sets. Empty list when nothing is due.

        ``acks``: claims to :meth:`ack_many` first, so that a worker loop costs one
        call per batch (``claims = q.claim(limit, lease, acks=claims)``; on Redis
        one round trip). Their results are the returned batch's ``acked``. On a
        StoreUnavailableError the acks may or may not have been applied: ack them
        again (a repeated ack is refused, the item stays removed)."""

    def ack(self, claim: Claim) -> bool:
        """Remove the item if ``claim`` still holds it. False if it was re-granted."""

    def ack_many(self, claims: Sequence[Claim]) -> list[bool]:
        """:meth:`ack` for a batch in one round trip; results in the order given."""

    def retry(self, claim: Claim, due_at: float) -> bool:
        """Put the item back for ``due_at`` if ``claim`` still holds it, keeping its
        attempt count. False if it was re-granted."""

    def depth(self) -> QueueDepth:
        """Counts of due, scheduled and in-flight items."""


@runtime_checkable
class LeaseStore(Protocol):
    """The leases of a coordination store: all that the cron guard
    (:func:`onceonly.scheduled`) uses. A wrapper of your own (logging,
    metrics, fault injection) that forwards these methods is enough for it,
    and stays enough when the store grows other methods."""

    def acquire(self, name: str, ttl: float = 30.0) -> Lease | None:
        """Grant ``name`` for ``ttl`` seconds, or None if it is held or completed."""

    def renew(self, lease: Lease, ttl: float = 30.0) -> Lease:
        """Extend a held lease to now + ``ttl``. Raises LeaseLostError if it was re-granted."""

    def release(self, lease: Lease) -> bool:
        """Give the name back at once. False if this lease no longer held it."""

    def complete(self, lease: Lease, keep: float = 86400.0, *, expire: bool = False) -> bool:
        """Mark ``name`` done: acquire() returns None for ``keep`` seconds. False if
        this lease no longer held it.

        ``expire=True`` lets the store delete the record once ``keep`` has passed
        (Redis: the key's expiry; DynamoDB: the ``expire_at`` TTL attribute;
        PostgreSQL: pruned by later expiring completions and ``prune_expired``).
        The name's token then starts again at 1 (on Redis: above the server's clock
        floor, see docs/coordination.md), so ask for it only for names that
        are never granted again after ``keep``, such as one cron tick. Without it
        the record is kept forever and the token strictly increases."""

    def inspect(self, name: str) -> LeaseState | None:
        """The current record of ``name`` (for status tools), or None if never granted."""


@runtime_checkable
class Store(LeaseStore, Protocol):
    """A coordination store: leases with fencing tokens, counting semaphores
    and due queues."""

    def setup(self) -> None:
        """Create the tables/indexes the store needs. Idempotent."""

    def take_permit(self, name: str, limit: int, ttl: float = 30.0) -> Permit | None:
        """Take one of at most ``limit`` places of the counting semaphore
        ``name`` for ``ttl`` seconds, or None when ``limit`` permits are held.
        One atomic store operation, which also drops the holders whose ttl has
        ended (a crashed holder's permit frees itself). ``limit`` is read on each
        call: lowered below the holders, no permit until they fall below it;
        raised, the new places are free at once. Semaphore names are apart from
        lease names. Raises ConfigError for a bad name, limit or ttl."""

    def take_permits(self, wants: Sequence[tuple[str, int]], ttl: float = 30.0) -> list[Permit | None]:
        """take_permit for each ``(name, limit)`` of ``wants``, in order: a Permit
        or None each, every one taken as take_permit takes it (a name listed
        twice asks for two places). On PostgreSQL one statement for them all;
        on Redis and DynamoDB one operation each. Raises ConfigError for a bad
        want or ttl, before taking any."""

    def return_permit(self, permit: Permit) -> bool:
        """Give the place back at once (one atomic store operation). False if
        the permit had expired or was already returned: nothing else is freed."""

    def return_permits(self, permits: Sequence[Permit]) -> list[bool]:
        """return_permit for each of ``permits``, in order. On PostgreSQL one
        statement for them all; on Redis and DynamoDB one operation each.
        Raises ConfigError for a bad permit, before returning any."""

    def queue(self, name: str) -> Queue:
        """The due queue called ``name`` (created lazily)."""

    def close(self) -> None:
        """Close the connections the store opened itself."""


@dataclass(frozen=True)
class LeaseState:
    """What the store records for a lease name, for status displays."""

    name: str
    owner: str | None
    token: int
    busy_until: float  # epoch seconds: held or completed until then
    completed: bool
    grants: int | None = None  # as in Lease

    @property
    def grant_number(self) -> int:
        """How many times the name was granted (the token where that is the count)."""
        return self.token if self.grants is None else self.grants
