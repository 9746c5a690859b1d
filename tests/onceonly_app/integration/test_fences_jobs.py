"""The scheduled jobs' fences refuse a stale holder in every order. The tick
and poller tokens come from the coordination store, so these
run on every store; the notifications' claim tokens come from PostgreSQL.

Holder 1 (the stale run) was granted first; its lease then ran out (released
here: the store grants the name again exactly as after an expiry, without a
wait) and holder 2 was granted a higher token. Holder 2 runs in a thread and
stops right after it stamped; holder 1 then makes every write it still could:
stamp, transition or generation, finish, cursor advance, outcome. Each is
refused, and holder 2 does the work when it is let go. The seams are the
jobs' own injected parts (a fence subclass, the payments source, the sender)."""

from __future__ import annotations

import base64
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, cast

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import onceonly
from onceonly import Lease, Tick
from onceonly.scheduled import tick_lock_name
from onceonly_app.billing import fenced_batches, notifications, overdue, payment_watcher, recurring
from onceonly_app.billing.assets import AcceptedAssets, Asset
from onceonly_app.billing.config import NotificationSettings
from onceonly_app.billing.payments_api import Page, Payment
from onceonly_app.billing.ses import SendError
from onceonly_app.billing.ticks import FencedError, TickFence
from tests.support.jobs import jobs_data as data
from tests.support.jobs.jobs_helpers import aws_client
from tests.support.stores.interleave import WAIT, Interleaving, wait_until_blocked_by

TTL = 60.0


def two_grants(store: onceonly.Store, name: str) -> tuple[Lease, Lease]:
    """The stale holder's lease and the newer one's, with a higher token."""
    stale = store.acquire(name, ttl=TTL)
    assert stale is not None and store.release(stale)  # its lease is over: the name is free again
    current = store.acquire(name, ttl=TTL)
    assert current is not None and current.token > stale.token
    return stale, current


def two_ticks(store: onceonly.Store, job: str, when: datetime) -> tuple[Tick, Tick]:
    stale, current = two_grants(store, tick_lock_name(job, when))
    return Tick(job, when, None, stale, TTL, store), Tick(job, when, None, current, TTL, store)


def a_tick(store: onceonly.Store, job: str, when: str) -> Tick:
    at = datetime.fromisoformat(when)
    lease = store.acquire(tick_lock_name(job, at), ttl=TTL)
    assert lease is not None
    return Tick(job, at, None, lease, TTL, store)


@pytest.fixture
def newer_pool(jobs_db: str) -> Iterator[ConnectionPool]:
    """Holder 2's connections: another Lambda container's pool."""
    with ConnectionPool(jobs_db, min_size=0, max_size=2, open=True) as p:
        yield p


# -- the tick fence: overdue invoices and recurring billing --------------------

class FenceSeams:
    """Callbacks the jobs' TickFence runs at its seams, per run (by token):
    "after stamp", "before commit" (given the connection), "after commit",
    "before finish"."""

    def __init__(self) -> None:
        self._hooks: dict[tuple[int, str], Callable[..., None]] = {}

    def at(self, tick: Tick, where: str, hook: Callable[..., None]) -> None:
        self._hooks[(tick.token, where)] = hook

    def run(self, token: int, where: str, *args: Any) -> None:
        hook = self._hooks.pop((token, where), None)
        if hook is not None:
            hook(*args)

    def fence_class(self) -> type[TickFence]:
        seams = self

        class SeamedFence(TickFence):
            def __init__(self, pool: ConnectionPool, tick: Tick) -> None:
                super().__init__(pool, tick)
                self._token = tick.token

            def stamp(self) -> None:
                super().stamp()
                seams.run(self._token, "after stamp")

            @contextmanager
            def transaction(self) -> Iterator[psycopg.Connection[Any]]:
                with super().transaction() as conn:
                    yield conn
                    seams.run(self._token, "before commit", conn)
                seams.run(self._token, "after commit")

            def finish(self, result: dict[str, Any]) -> None:
                seams.run(self._token, "before finish")
                super().finish(result)

        return SeamedFence


@pytest.fixture
def seams(monkeypatch: pytest.MonkeyPatch) -> FenceSeams:
    fence_seams = FenceSeams()
    # overdue and recurring both stamp and commit through fenced_batches' TickFence
    monkeypatch.setattr(fenced_batches, "TickFence", fence_seams.fence_class())
    return fence_seams


@dataclass(frozen=True)
class TickJob:
    """A job fenced by its tick: three things to do for the test's tenant."""

    name: str
    when: datetime
    seed: Callable[[psycopg.Connection[Any], str], None]
    run: Callable[[ConnectionPool, Tick, str], int]  # how many things this run did
    done: Callable[[psycopg.Connection[Any], str], int]  # how many are done, by anyone
    result_key: str


def _seed_overdue(conn: psycopg.Connection[Any], tenant: str) -> None:
    data.ledger_read(conn, f"watcher-{tenant}", tenant=tenant)  # the tenant's payment watcher is not behind
    for _ in range(3):
        data.add_invoice(conn, tenant, due_at="2026-11-01T00:00:00Z")


def _seed_recurring(conn: psycopg.Connection[Any], tenant: str) -> None:
    data.add_schedule(conn, tenant, cadence="daily", anchor=date(2026, 11, 27))  # the 27th, 28th and 29th


def _count(query: str) -> Callable[[psycopg.Connection[Any], str], int]:
    return lambda conn, tenant: int(conn.execute(query, (tenant,)).fetchone()["n"])


JOBS = {
    "overdue": TickJob(
        "overdue", datetime(2026, 11, 29, 2, 0, tzinfo=UTC), _seed_overdue,
        lambda pool, tick, tenant: overdue.run(pool, tick, watcher=f"watcher-{tenant}", tenant=tenant).transitioned,
        _count("SELECT count(*) AS n FROM invoices WHERE tenant_id = %s AND status = 'overdue'"), "transitioned"),
    "recurring": TickJob(
        "recurring", datetime(2026, 11, 29, 0, 30, tzinfo=UTC), _seed_recurring,
        lambda pool, tick, tenant: recurring.run(pool, tick, tenant=tenant).generated,
        _count("SELECT count(*) AS n FROM invoices WHERE tenant_id = %s"), "generated"),
}


class TickRuns:
    """One job's two runs of one tick, for the test's tenant and job name."""

    def __init__(self, job: TickJob, db: str, pool: ConnectionPool, newer_pool: ConnectionPool,
                 store: onceonly.Store, unique: str, interleave: Interleaving) -> None:
        self.job, self.db, self.pool = job, db, pool
        self.tenant, self.job_name = f"tenant-{unique}", f"{job.name}-{unique}"
        with data.connect(db) as conn:
            job.seed(conn, self.tenant)
        self.stale, self.current = two_ticks(store, self.job_name, job.when)
        self.newer = interleave.background(
            "holder-2", lambda: job.run(newer_pool, self.current, self.tenant))

    def run_stale(self) -> int:
        return self.job.run(self.pool, self.stale, self.tenant)

    def done(self) -> int:
        with data.connect(self.db) as conn:
            return self.job.done(conn, self.tenant)

    def tick_row(self) -> tuple[int, Any]:
        with data.connect(self.db) as conn:
            (row,) = data.rows(conn, "SELECT fence_token, result FROM job_ticks WHERE job = %s", self.job_name)
        return row["fence_token"], row["result"]


@pytest.fixture(params=sorted(JOBS))
def runs(request: pytest.FixtureRequest, jobs_db: str, pool: ConnectionPool, newer_pool: ConnectionPool,
         store: onceonly.Store, unique: str, interleave: Interleaving) -> TickRuns:
    return TickRuns(JOBS[request.param], jobs_db, pool, newer_pool, store, unique, interleave)


# Where the stale run is when the newer one stamps, as its fence's seam (None:
# granted but not stamped yet), and how many things it committed by then.
STALE_RUN_AT = {
    "stamp": (None, 0),
    "commit": ("after stamp", 0),
    "finish": ("before finish", 3),
}


@pytest.mark.parametrize("stale_write", sorted(STALE_RUN_AT))
def test_a_stale_runs_write_is_refused_once_the_newer_run_stamped(
        stale_write: str, runs: TickRuns, seams: FenceSeams, interleave: Interleaving) -> None:
    seam, committed_before = STALE_RUN_AT[stale_write]
    stamped = interleave.seam("holder 2 stamped")
    seams.at(runs.current, "after stamp", stamped)

    def newer_run_stamps() -> None:
        runs.newer.start(until=stamped)

    if seam is None:
        newer_run_stamps()
    else:
        seams.at(runs.stale, seam, newer_run_stamps)
    with pytest.raises(FencedError):
        runs.run_stale()
    assert runs.done() == committed_before  # nothing after the newer stamp

    stamped.let_go()
    assert runs.newer.result() == 3 - committed_before
    assert runs.done() == 3
    assert runs.tick_row() == (runs.current.token, {runs.job.result_key: 3 - committed_before})


def test_a_newer_stamp_waits_for_a_stale_commit_in_flight(runs: TickRuns, seams: FenceSeams) -> None:
    """The order with no refusal: holder 2 stamps while holder 1's transaction
    is open. The stamp must wait for that commit (the row lock the transaction
    took on the fence), so no stale commit lands after a newer stamp."""
    order: list[str] = []
    newer_stamped = threading.Event()

    def newer_stamps_meanwhile(conn: psycopg.Connection[Any]) -> None:
        runs.newer.start()
        wait_until_blocked_by(runs.db, conn.info.backend_pid, unless=newer_stamped.is_set)
        # Noted before the commit: holder 2 can only stamp once it is done, so
        # the order is decided by the lock, not by which thread is scheduled first.
        order.append("holder 1 commits")

    def committed() -> None:
        assert newer_stamped.wait(WAIT)  # so that holder 1's finish comes after holder 2's stamp

    def stamped() -> None:
        order.append("holder 2 stamped")
        newer_stamped.set()

    seams.at(runs.stale, "before commit", newer_stamps_meanwhile)
    seams.at(runs.stale, "after commit", committed)
    seams.at(runs.current, "after stamp", stamped)

    with pytest.raises(FencedError):  # refused at finish: holder 2 stamped after holder 1's commit
        runs.run_stale()
    assert runs.newer.result() == 0
    assert order == ["holder 1 commits", "holder 2 stamped"]
    assert runs.done() == 3


# -- the payment cursor ---------------------------------------------------------

TWO_PAYMENTS = 2


class PaymentsPages:
    """The payments API in memory for one poller: pages after a cursor (paging
    tokens are positions), the cursors it was asked for, and ``during_page``
    run once while a page is being fetched."""

    def __init__(self, payments: list[Payment], during_page: Callable[[], None] | None = None) -> None:
        self.payments = payments
        self.during_page = during_page
        self.asked: list[str] = []

    def page(self, cursor: str, limit: int = 200, *, timeout: float | None = None,
             account: str | None = None) -> Page:
        self.asked.append(cursor)
        if self.during_page is not None:
            hook, self.during_page = self.during_page, None
            hook()
        start = int(cursor or 0)
        chunk = self.payments[start:start + limit]
        return Page(chunk, skipped=0, next_cursor=chunk[-1].paging_token if chunk else cursor,
                    full=len(chunk) == limit, read_to=None)


def account_id() -> str:
    """A fresh ledger account id (G + 55 base32 characters)."""
    return "G" + base64.b32encode(secrets.token_bytes(35)).decode()[:55]


class StoreWithSeam:
    """A poller's coordination store that runs ``after_grant`` once it granted
    the poller lease, before the poller stamps the cursor. It keeps the leases
    it granted, so that a test can end one as its expiry would."""

    def __init__(self, store: onceonly.Store) -> None:
        self._store = store
        self.after_grant: Callable[[], None] | None = None
        self.granted: list[Lease] = []

    def acquire(self, name: str, ttl: float = 30.0) -> Lease | None:
        lease = self._store.acquire(name, ttl=ttl)
        if lease is not None and name.startswith("poller:"):
            self.granted.append(lease)
            if self.after_grant is not None:
                hook, self.after_grant = self.after_grant, None
                hook()
        return lease

    def lease_runs_out(self) -> None:
        (lease,) = self.granted
        assert self._store.release(lease)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class Pollers:
    """Two payment watcher runs of consecutive minutes (two tick locks) on one
    poller: holder 1 is granted the poller lease first, holder 2 after it ran out."""

    def __init__(self, db: str, newer_pool: ConnectionPool, store: onceonly.Store, store_url: str, unique: str,
                 moto_endpoint: str, sqs_queue: str, interleave: Interleaving) -> None:
        self.db, self.job, self.tenant = db, f"poller-{unique}", f"tenant-{unique}"
        self.sqs, self.sqs_queue = aws_client("sqs", moto_endpoint), sqs_queue
        receiver, issuer = account_id(), account_id()
        self.cursor_row = payment_watcher.cursor_name(self.job, receiver)  # the receiving account's feed
        self.accepted = AcceptedAssets.parse(f"USD=USD:{issuer}")
        with data.connect(db) as conn:
            invoices = [data.add_invoice(conn, self.tenant, due_at="2026-12-01T00:00:00Z", amount_cents=700)
                        for _ in range(TWO_PAYMENTS)]
            data.add_receiving_account(conn, self.tenant, receiver)
        self.payments = [Payment(payment_id=f"p-{unique}-{n}", paging_token=str(n + 1),
                                 transaction_hash=f"tx-{unique}-{n}", operation_type="payment", to_account=receiver,
                                 asset=Asset("USD", issuer), amount=Decimal("7.00"), memo=invoice,
                                 created_at=datetime(2026, 11, 29, 10, 0, tzinfo=UTC))
                         for n, invoice in enumerate(invoices)]
        self.stale_store = StoreWithSeam(store)
        self.newer_store = onceonly.connect(store_url)
        self.newer_fetching = interleave.seam("holder 2 fetching its first page")
        self.newer_source = PaymentsPages(self.payments, during_page=self.newer_fetching)
        self.newer = interleave.background("holder-2", lambda: self._poll(
            newer_pool, self.newer_store, "2026-11-29T10:08:00+00:00", self.newer_source))

    def _poll(self, pool: ConnectionPool, store: onceonly.Store, when: str,
              source: PaymentsPages) -> payment_watcher.WatchResult:
        poll = payment_watcher.Poll(source, self.accepted, poller_ttl=TTL)
        return payment_watcher.run(pool, a_tick(store, self.job, when), poll, self.sqs, self.sqs_queue,
                                   tenant=self.tenant)

    def poll_stale(self, pool: ConnectionPool, source: PaymentsPages) -> payment_watcher.WatchResult:
        return self._poll(pool, cast(onceonly.Store, self.stale_store), "2026-11-29T10:07:00+00:00", source)

    def newer_takes_over(self, *, until_fetching: bool = True) -> None:
        """Holder 1's poller lease runs out; holder 2 takes it and stamps the
        cursor, and (``until_fetching``) has stopped fetching its first page."""
        self.stale_store.lease_runs_out()
        self.newer.start(until=self.newer_fetching if until_fetching else None)

    def stale_token(self) -> int:
        (lease,) = self.stale_store.granted
        return lease.token

    def cursor(self) -> tuple[str, int]:
        with data.connect(self.db) as conn:
            (row,) = data.rows(conn, "SELECT cursor, fence_token FROM payment_cursors WHERE poller = %s",
                               self.cursor_row)
        return row["cursor"], row["fence_token"]

    def payment_tokens(self) -> list[int]:
        with data.connect(self.db) as conn:
            rows = data.rows(conn, "SELECT fence_token FROM payments WHERE poller = %s ORDER BY paging_token",
                             self.job)
        return [r["fence_token"] for r in rows]

    def all_applied_by_the_newer_poller(self) -> None:
        cursor, token = self.cursor()
        assert token > self.stale_token()
        assert cursor == self.payments[-1].paging_token
        assert self.payment_tokens() == [token] * TWO_PAYMENTS

    def close(self) -> None:
        self.newer_store.close()


@pytest.fixture
def pollers(jobs_db: str, newer_pool: ConnectionPool, store: onceonly.Store, store_url: str, unique: str,
            moto_endpoint: str, sqs_queue: str, interleave: Interleaving) -> Iterator[Pollers]:
    p = Pollers(jobs_db, newer_pool, store, store_url, unique, moto_endpoint, sqs_queue, interleave)
    yield p
    p.close()


def test_a_stale_poller_cannot_stamp_the_cursor_after_the_newer_one(pollers: Pollers, pool: ConnectionPool) -> None:
    pollers.stale_store.after_grant = pollers.newer_takes_over  # holder 1 pauses between grant and stamp

    with pytest.raises(FencedError):
        pollers.poll_stale(pool, PaymentsPages(pollers.payments))
    assert pollers.cursor()[0] == "" and pollers.payment_tokens() == []

    pollers.newer_fetching.let_go()
    current = pollers.newer.result()
    assert (current.payments_applied, current.invoices_paid) == (TWO_PAYMENTS, TWO_PAYMENTS)
    pollers.all_applied_by_the_newer_poller()


def test_a_stale_poller_cannot_apply_a_page_once_the_newer_one_stamped(pollers: Pollers,
                                                                       pool: ConnectionPool) -> None:
    stale_source = PaymentsPages(pollers.payments, during_page=pollers.newer_takes_over)

    with pytest.raises(FencedError):  # it fetched its page; applying it is refused
        pollers.poll_stale(pool, stale_source)
    assert pollers.cursor()[0] == "" and pollers.payment_tokens() == []

    pollers.newer_fetching.let_go()
    assert pollers.newer.result().payments_applied == TWO_PAYMENTS
    pollers.all_applied_by_the_newer_poller()


def test_a_newer_cursor_stamp_waits_for_a_stale_page_in_flight(pollers: Pollers, pool: ConnectionPool,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The order with no refusal: holder 2 stamps while holder 1 applies a page.
    The stamp waits for that commit (the row lock on the cursor), so holder 2
    starts from the cursor holder 1 committed, never from an older one."""
    apply = payment_watcher._apply
    taken_over = threading.Event()

    def apply_then_newer_takes_over(conn: psycopg.Connection[Any], *args: Any) -> None:
        apply(conn, *args)
        if not taken_over.is_set():  # after holder 1's first payment, inside its page's transaction
            taken_over.set()
            pollers.newer_takes_over(until_fetching=False)
            wait_until_blocked_by(pollers.db, conn.info.backend_pid, unless=lambda: bool(pollers.newer_source.asked))

    monkeypatch.setattr(payment_watcher, "_apply", apply_then_newer_takes_over)
    stale = pollers.poll_stale(pool, PaymentsPages(pollers.payments))
    assert stale.payments_applied == TWO_PAYMENTS  # committed before holder 2's stamp: it stands

    pollers.newer_fetching.let_go()
    assert pollers.newer.result().payments_applied == 0
    assert pollers.newer_source.asked == [pollers.payments[-1].paging_token]  # where holder 1's commit left it
    assert pollers.payment_tokens() == [pollers.stale_token()] * TWO_PAYMENTS


def test_a_stale_cursor_advance_is_refused_even_without_its_hold(pool: ConnectionPool, store: onceonly.Store,
                                                                 unique: str) -> None:
    """advance_cursor repeats the hold's token check (defence in depth): on its
    own, after a newer poller stamped, it moves nothing."""
    poller = f"poller-{unique}"
    stale, current = two_grants(store, payment_watcher.poller_lease_name(poller))
    sql = payment_watcher.SQL
    with pool.connection() as conn:
        assert conn.execute(sql["stamp_cursor"], {"poller": poller, "token": stale.token}).fetchone() == ("",)
        assert conn.execute(sql["stamp_cursor"], {"poller": poller, "token": current.token}).fetchone() == ("",)
        moved = conn.execute(sql["advance_cursor"], {"poller": poller, "token": stale.token, "cursor": "9",
                                                      "read_to": None})
        assert moved.fetchone() is None
        row = conn.execute("SELECT cursor, fence_token FROM payment_cursors WHERE poller = %s", (poller,))
        assert row.fetchone() == ("", current.token)


# -- notifications: the claim token is PostgreSQL's own -----------------------

def notification_settings(claim_ttl: float) -> NotificationSettings:
    return NotificationSettings(sender="billing@onceonly.test", claim_ttl=claim_ttl, max_attempts=3, batch_size=5,
                                retry_schedule=(60.0,))


class ScriptedSes:
    """Stands in for SES: ``during`` runs while the send is in flight, then it
    returns a message id, or raises SendError when ``fails``."""

    def __init__(self, message_id: str, *, fails: bool = False, during: Callable[[], None] | None = None) -> None:
        self.message_id, self.fails, self.during = message_id, fails, during
        self.calls = 0  # sends started: e-mails that may have gone out

    def send(self, recipient: str, subject: str, body_text: str) -> str:
        self.calls += 1
        if self.during is not None:
            self.during()
        if self.fails:
            raise SendError("Throttling", "maximum sending rate exceeded")
        return self.message_id


@pytest.mark.parametrize("stale_send_fails", [False, True], ids=["stale-sent", "stale-failed"])
def test_a_stale_senders_outcome_is_refused_once_the_row_was_claimed_again(
        stale_send_fails: bool, jobs_db: str, pool: ConnectionPool, newer_pool: ConnectionPool,
        pg_store: onceonly.Store, unique: str, interleave: Interleaving) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        data.add_notification(conn, tenant)
    sending = interleave.seam("holder 2 sending")
    newer = interleave.background("holder-2", lambda: notifications.run(
        newer_pool, a_tick(pg_store, unique, "2026-11-29T10:10:00+00:00"), ScriptedSes("ses-newer", during=sending),
        notification_settings(claim_ttl=TTL), tenant=tenant))
    # Holder 1's claim runs out at once (claim_ttl 0): holder 2 claims the row while holder 1 is sending.
    stale_ses = ScriptedSes("ses-stale", fails=stale_send_fails, during=lambda: newer.start(until=sending))

    stale = notifications.run(pool, a_tick(pg_store, unique, "2026-11-29T10:05:00+00:00"), stale_ses,
                              notification_settings(claim_ttl=0.0), tenant=tenant)
    assert (stale.sent, stale.retrying, stale.failed, stale.claims_lost) == (0, 0, 0, 1)

    sending.let_go()
    assert newer.result().sent == 1
    with data.connect(jobs_db) as conn:
        (row,) = data.rows(conn, "SELECT id, status, attempts, provider_message_id, claim_token FROM notifications"
                                 " WHERE tenant_id = %s", tenant)
        log = data.rows(conn, "SELECT claim_token, outcome FROM notification_attempts WHERE notification_id = %s"
                              " ORDER BY id", row["id"])
    assert (row["status"], row["attempts"], row["provider_message_id"]) == ("sent", 2, "ses-newer")
    stale_outcome = "failed" if stale_send_fails else "sent"
    assert [(a["claim_token"], a["outcome"]) for a in log] == [(1, stale_outcome), (2, "sent")]


# -- notifications: the last claim given up while its holder is only slow ------

class Crash(Exception):
    """A sender dying mid-send: not a SendError, so nothing is recorded."""


def crash() -> None:
    raise Crash


def with_claims_used(conn: psycopg.Connection[Any], tenant: str, used: int) -> int:
    """A notification that ``used`` earlier claims (attempts, tokens 1..used) left pending."""
    data.add_notification(conn, tenant)
    (row,) = data.rows(conn, "UPDATE notifications SET attempts = %s, claim_token = %s WHERE tenant_id = %s"
                             " RETURNING id", used, used, tenant)
    return int(row["id"])


def notification_state(conn: psycopg.Connection[Any], note: int) -> tuple[Any, ...]:
    (row,) = data.rows(conn, "SELECT status, attempts, claim_token, last_error, provider_message_id"
                             " FROM notifications WHERE id = %s", note)
    return tuple(row.values())


def attempt_log(conn: psycopg.Connection[Any], note: int) -> list[tuple[int, str]]:
    return [(a["claim_token"], a["outcome"]) for a in data.rows(
        conn, "SELECT claim_token, outcome FROM notification_attempts WHERE notification_id = %s ORDER BY id", note)]


@pytest.mark.parametrize("last_send_fails", [False, True], ids=["sent", "failed"])
def test_a_slow_last_holder_still_records_its_outcome_after_the_give_up(
        last_send_fails: bool, jobs_db: str, pool: ConnectionPool, newer_pool: ConnectionPool,
        pg_store: onceonly.Store, unique: str) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        note = with_claims_used(conn, tenant, 2)  # max_attempts 3: the next claim is the last
    later_ses = ScriptedSes("ses-later")
    seen: dict[str, Any] = {}

    def give_up_meanwhile() -> None:
        # The holder is paused mid-send past its claim (claim_ttl 0); a later run gives the row up.
        seen["later"] = notifications.run(newer_pool, a_tick(pg_store, unique, "2026-11-29T10:10:00+00:00"),
                                          later_ses, notification_settings(claim_ttl=TTL), tenant=tenant)
        with data.connect(jobs_db) as conn:
            seen["state"] = notification_state(conn, note)

    slow = ScriptedSes("ses-slow", fails=last_send_fails, during=give_up_meanwhile)
    result = notifications.run(pool, a_tick(pg_store, unique, "2026-11-29T10:05:00+00:00"), slow,
                               notification_settings(claim_ttl=0.0), tenant=tenant)

    assert seen["later"].abandoned == 1
    assert seen["state"] == ("failed", 3, 3, notifications.GIVEN_UP, None)
    assert (slow.calls, later_ses.calls) == (1, 0)  # the e-mail went out once
    with data.connect(jobs_db) as conn:
        status, attempts, token, error, message_id = notification_state(conn, note)
        log = attempt_log(conn, note)
    if last_send_fails:
        assert (result.sent, result.failed, result.claims_lost) == (0, 1, 0)
        assert (status, message_id) == ("failed", None) and "maximum sending rate" in error
        assert log == [(3, "failed")]
    else:
        assert (result.sent, result.failed, result.claims_lost) == (1, 0, 0)
        assert (status, attempts, token, error, message_id) == ("sent", 3, 3, None, "ses-slow")
        assert log == [(3, "sent")]


def test_an_older_holder_is_still_refused_after_the_give_up(
        jobs_db: str, pool: ConnectionPool, newer_pool: ConnectionPool, pg_store: onceonly.Store,
        unique: str) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        note = with_claims_used(conn, tenant, 1)  # holder 1 gets claim 2, holder 2 the last one (3)
    seen: dict[str, Any] = {}

    def newer_claims_dies_and_is_given_up() -> None:
        # Holder 1's claim ran out at once: holder 2 claims the row, dies mid-send, and is given up.
        with pytest.raises(Crash):
            notifications.run(newer_pool, a_tick(pg_store, unique, "2026-11-29T10:10:00+00:00"),
                              ScriptedSes("ses-dead", during=crash), notification_settings(claim_ttl=0.0),
                              tenant=tenant)
        seen["later"] = notifications.run(newer_pool, a_tick(pg_store, unique, "2026-11-29T10:15:00+00:00"),
                                          ScriptedSes("ses-later"), notification_settings(claim_ttl=TTL),
                                          tenant=tenant)

    older = ScriptedSes("ses-older", during=newer_claims_dies_and_is_given_up)
    result = notifications.run(pool, a_tick(pg_store, unique, "2026-11-29T10:05:00+00:00"), older,
                               notification_settings(claim_ttl=0.0), tenant=tenant)

    assert seen["later"].abandoned == 1
    assert (result.sent, result.claims_lost) == (0, 1)
    with data.connect(jobs_db) as conn:
        assert notification_state(conn, note) == ("failed", 3, 3, notifications.GIVEN_UP, None)
        assert attempt_log(conn, note) == [(2, "sent")]  # the audit of what holder 1 sent is kept


def test_a_dead_last_holders_row_is_given_up_and_not_sent_again(
        jobs_db: str, pool: ConnectionPool, newer_pool: ConnectionPool, pg_store: onceonly.Store,
        unique: str) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        note = with_claims_used(conn, tenant, 2)
    with pytest.raises(Crash):
        notifications.run(pool, a_tick(pg_store, unique, "2026-11-29T10:05:00+00:00"),
                          ScriptedSes("ses-dead", during=crash), notification_settings(claim_ttl=0.0), tenant=tenant)
    later_ses = ScriptedSes("ses-later")
    later = [notifications.run(newer_pool, a_tick(pg_store, unique, when), later_ses,
                               notification_settings(claim_ttl=TTL), tenant=tenant)
             for when in ("2026-11-29T10:10:00+00:00", "2026-11-29T10:15:00+00:00")]

    assert [r.abandoned for r in later] == [1, 0]
    assert later_ses.calls == 0
    with data.connect(jobs_db) as conn:
        assert notification_state(conn, note) == ("failed", 3, 3, notifications.GIVEN_UP, None)
        assert attempt_log(conn, note) == []


def test_only_a_give_up_takes_a_late_outcome_not_a_row_failed_otherwise(
        jobs_db: str, pool: ConnectionPool, pg_store: onceonly.Store, unique: str) -> None:
    tenant = f"tenant-{unique}"
    with data.connect(jobs_db) as conn:
        note = with_claims_used(conn, tenant, 2)

    def failed_by_hand() -> None:  # an operator stops the row while its last holder is sending
        with data.connect(jobs_db) as conn:
            conn.execute("UPDATE notifications SET status = 'failed', last_error = 'stopped by hand' WHERE id = %s",
                         (note,))

    result = notifications.run(pool, a_tick(pg_store, unique, "2026-11-29T10:05:00+00:00"),
                               ScriptedSes("ses-last", during=failed_by_hand), notification_settings(claim_ttl=TTL),
                               tenant=tenant)

    assert (result.sent, result.claims_lost) == (0, 1)
    with data.connect(jobs_db) as conn:
        assert notification_state(conn, note) == ("failed", 3, 3, "stopped by hand", None)
