"""The reference model a store is checked against: what a correct store must
answer, step by step, for leases and one due queue, driven by one client.

Time is the only thing the model cannot know exactly: the store applies an
operation at some moment between its call and its return, by its own clock
(PostgreSQL's and Redis's are the server's). So every expiry is a window,
``[call of the grant + ttl, return of the grant + ttl]``, and a question like
"is this lease expired?" has three answers: surely, surely not, or either. When
it is "either", the model accepts both answers and learns from the one given.
The checks are exact wherever time is not involved: tokens, fencing (a stale
lease or claim is always refused), depth totals, attempts."""

from __future__ import annotations

from dataclasses import dataclass, field

from onceonly import Claim, Lease, LeaseState, QueueDepth

# Store clocks round (Redis keeps milliseconds): how far a store time may sit
# outside the window the client measured around the call.
SLACK = 0.005


@dataclass(frozen=True)
class Call:
    """When one store operation ran, by the client's clock: it took effect in between."""

    start: float
    end: float


@dataclass(frozen=True)
class Window:
    """A store time known to lie in ``[lo, hi]``."""

    lo: float
    hi: float

    @classmethod
    def after(cls, call: Call, seconds: float) -> Window:
        return cls(call.start + seconds, call.end + seconds)

    @classmethod
    def at(cls, t: float) -> Window:
        return cls(t, t)

    def passed(self, call: Call) -> bool | None:
        """Had this time passed when ``call`` took effect? None: cannot tell."""
        if self.hi + SLACK < call.start:
            return True
        if self.lo - SLACK > call.end:
            return False
        return None

    def contains(self, t: float) -> bool:
        return self.lo - SLACK <= t <= self.hi + SLACK


def _key(grant: Lease | Claim) -> tuple[str, int]:
    return (grant.owner, grant.token)


@dataclass
class LeaseModel:
    token: int = 0  # the last granted token; 0: never granted
    holder: Lease | None = None  # the current grant, while neither released nor completed
    owner: str | None = None  # what the store records as owner (None after a release)
    completed: bool = False
    busy_until: Window | None = None  # held or completed until then; None: free


class Leases:
    def __init__(self) -> None:
        self.names: dict[str, LeaseModel] = {}

    def get(self, name: str) -> LeaseModel:
        return self.names.setdefault(name, LeaseModel())

    def acquire(self, name: str, ttl: float, call: Call, got: Lease | None) -> None:
        m = self.get(name)
        free = True if m.busy_until is None else m.busy_until.passed(call)
        if free is True:
            assert got is not None, f"acquire({name}) refused, but the name was free ({m})"
        if free is False:
            assert got is None, f"acquire({name}) granted token {got and got.token} while busy ({m})"
        if got is None:
            return
        assert got.name == name
        assert got.token > m.token, f"token {got.token} after token {m.token}: not strictly increasing"
        window = Window.after(call, ttl)
        assert window.contains(got.expires_at), f"expires_at {got.expires_at} outside {window}"
        self.names[name] = LeaseModel(got.token, got, got.owner, False, window)

    def _is_current(self, lease: Lease) -> bool:
        m = self.get(lease.name)
        return m.holder is not None and _key(m.holder) == _key(lease)

    def renew(self, lease: Lease, ttl: float, call: Call, got: Lease | None) -> None:
        """``got``: the renewed lease, or None for LeaseLostError."""
        if not self._is_current(lease):
            assert got is None, f"renew of a stale lease (token {lease.token}) was accepted"
            return
        assert got is not None, f"renew of the current lease (token {lease.token}) was refused"
        assert (got.token, got.owner) == (lease.token, lease.owner)
        window = Window.after(call, ttl)
        assert window.contains(got.expires_at), f"renewed expires_at {got.expires_at} outside {window}"
        m = self.get(lease.name)
        m.busy_until = window
        m.holder = got

    def release(self, lease: Lease, call: Call, ok: bool) -> None:
        current = self._is_current(lease)
        assert ok == current, f"release of {'the current' if current else 'a stale'} lease returned {ok}"
        if ok:
            m = self.get(lease.name)
            m.holder, m.owner, m.busy_until = None, None, None

    def complete(self, lease: Lease, keep: float, call: Call, ok: bool) -> None:
        current = self._is_current(lease)
        assert ok == current, f"complete of {'the current' if current else 'a stale'} lease returned {ok}"
        if ok:
            m = self.get(lease.name)
            m.holder, m.completed, m.busy_until = None, True, Window.after(call, keep)

    def inspect(self, name: str, got: LeaseState | None) -> None:
        m = self.get(name)
        if m.token == 0:
            assert got is None, f"inspect({name}) found a record of a name never granted: {got}"
            return
        assert got is not None, f"inspect({name}) lost the record of token {m.token}"
        assert (got.token, got.owner, got.completed) == (m.token, m.owner, m.completed), f"{got} vs model {m}"
        if m.busy_until is not None:
            assert m.busy_until.contains(got.busy_until), f"busy_until {got.busy_until} outside {m.busy_until}"


@dataclass
class ItemModel:
    token: int = 0
    attempt: int = 0
    holder: Claim | None = None  # the current claim, until ack/retry/put/cancel
    claimable_at: Window = field(default_factory=lambda: Window(0.0, 0.0))  # due time, or lease expiry


class QueueModel:
    def __init__(self) -> None:
        self.items: dict[str, ItemModel] = {}

    def put(self, item_id: str, due_at: float | None, call: Call) -> None:
        m = self.items.setdefault(item_id, ItemModel())  # token and attempt survive a reschedule
        m.holder = None
        m.claimable_at = Window(call.start, call.end) if due_at is None else Window.at(due_at)

    def cancel(self, item_id: str, ok: bool) -> None:
        assert ok == (item_id in self.items), f"cancel({item_id}) returned {ok}"
        self.items.pop(item_id, None)

    def claim(self, limit: int, lease: float, call: Call, got: list[Claim]) -> None:
        ids = [c.item_id for c in got]
        assert len(ids) == len(set(ids)), f"one claim returned an item twice: {ids}"
        assert len(got) <= limit
        surely_due = [i for i, m in self.items.items() if m.claimable_at.passed(call) is True]
        assert len(got) >= min(limit, len(surely_due)), f"claimed {ids}, but {surely_due} were due (limit {limit})"
        for c in got:
            m = self.items.get(c.item_id)
            assert m is not None, f"claimed {c.item_id}, which is not in the queue"
            assert m.claimable_at.passed(call) is not False, f"claimed {c.item_id} before it was claimable ({m})"
            assert c.token > m.token, f"{c.item_id}: token {c.token} after {m.token}: not strictly increasing"
            assert c.attempt == m.attempt + 1, f"{c.item_id}: attempt {c.attempt} after {m.attempt}"
            window = Window.after(call, lease)
            assert window.contains(c.lease_expires_at), f"lease_expires_at {c.lease_expires_at} outside {window}"
            m.token, m.attempt, m.holder, m.claimable_at = c.token, c.attempt, c, window

    def _is_current(self, claim: Claim) -> bool:
        m = self.items.get(claim.item_id)
        return m is not None and m.holder is not None and _key(m.holder) == _key(claim)

    def ack(self, claim: Claim, ok: bool) -> None:
        current = self._is_current(claim)
        assert ok == current, f"ack of {'the current' if current else 'a stale'} claim of {claim.item_id} " \
                              f"(token {claim.token}) returned {ok}"
        if ok:
            del self.items[claim.item_id]

    def retry(self, claim: Claim, due_at: float, ok: bool) -> None:
        current = self._is_current(claim)
        assert ok == current, f"retry of {'the current' if current else 'a stale'} claim of {claim.item_id} " \
                              f"(token {claim.token}) returned {ok}"
        if ok:
            m = self.items[claim.item_id]
            m.holder, m.claimable_at = None, Window.at(due_at)

    def depth(self, call: Call, got: QueueDepth) -> None:
        sure = {"due": 0, "scheduled": 0, "in_flight": 0}
        maybe = dict(sure)
        for m in self.items.values():
            waiting = "in_flight" if m.holder is not None else "scheduled"
            passed = m.claimable_at.passed(call)
            if passed is None:
                maybe["due"] += 1
                maybe[waiting] += 1
            else:
                sure["due" if passed else waiting] += 1
        assert got.total == len(self.items), f"depth {got} counts {got.total} items, the queue has {len(self.items)}"
        for what in sure:
            value = getattr(got, what)
            assert sure[what] <= value <= sure[what] + maybe[what], f"depth.{what} = {value}, expected " \
                                                                    f"{sure[what]}..{sure[what] + maybe[what]}"
