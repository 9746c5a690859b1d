"""The payments client against the fake Horizon-style server: parsing (assets
with their issuer, operation ids, record types), paging parameters, whether a
page was full, timeouts (a whole-request deadline), and clear errors for
unusable answers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import requests

from onceonly_app.billing.assets import Asset
from onceonly_app.billing.payments_api import PaymentsApiError, PaymentsClient
from onceonly_cli.testing.fake_payments import FakePayments, random_account


@pytest.fixture
def fake() -> Iterator[FakePayments]:
    with FakePayments() as server:
        yield server


def test_reads_a_page_exactly_and_asks_for_ascending_order(fake: FakePayments) -> None:
    when = datetime(2026, 11, 20, 8, 15, tzinfo=UTC)
    first = fake.add(memo="inv_1", amount="12.5", created_at=when)
    other_issuer = random_account()
    fake.add(memo=None, amount="0.0000001", asset_code="EURC", asset_issuer=other_issuer)
    fake.add(memo=None, amount="3", asset_code=None)
    page = PaymentsClient(fake.url).page("", limit=1)
    assert [(p.payment_id, p.transaction_hash, p.amount, p.memo, p.created_at, p.to_account)
            for p in page.payments] == [(first["id"], first["transaction_hash"], Decimal("12.5"), "inv_1", when,
                                         fake.receiver)]
    assert page.payments[0].asset == Asset("USD", fake.issuer)
    assert page.next_cursor == first["paging_token"] and page.full
    assert fake.requests == [{}, {"cursor": "", "order": "asc", "limit": "1"}]  # the root, then the page
    rest = PaymentsClient(fake.url).page(page.next_cursor)
    assert [(p.amount, p.asset, p.memo) for p in rest.payments] == [
        (Decimal("0.0000001"), Asset("EURC", other_issuer), None), (Decimal("3"), Asset.native(), None)]
    assert not rest.full


def test_an_empty_page_keeps_the_cursor(fake: FakePayments) -> None:
    assert PaymentsClient(fake.url).page("4096").next_cursor == "4096"


def test_failed_transactions_are_skipped_but_advance_the_cursor(fake: FakePayments) -> None:
    failed = fake.add(memo="inv_1", amount="1", successful=False)
    page = PaymentsClient(fake.url).page("")
    assert page.payments == [] and page.skipped == 1 and page.next_cursor == failed["paging_token"]


def test_records_that_are_not_payments_are_skipped_not_errors(fake: FakePayments) -> None:
    """create_account has a starting_balance and no amount; account_merge has
    neither: today's client raised on them and the poller never moved again."""
    created = fake.add_transaction([fake.create_account("100"), fake.account_merge()])
    path = fake.add_transaction([fake.path_payment("5.25", source_amount="70", strict="send"),
                                 fake.path_payment("1", source_amount="13", strict="receive")], memo="inv_9")
    page = PaymentsClient(fake.url).page("", limit=4)
    assert page.skipped == 2 and page.full and page.next_cursor == path[-1]["paging_token"]
    assert [(p.payment_id, p.operation_type, p.amount) for p in page.payments] == [
        (path[0]["id"], "path_payment_strict_send", Decimal("5.25")),
        (path[1]["id"], "path_payment_strict_receive", Decimal("1"))]
    assert {p.transaction_hash for p in page.payments} == {path[0]["transaction_hash"]}
    assert len({r["id"] for r in [*created, *path]}) == 4  # one id per operation


def test_a_page_is_full_by_its_records_not_by_the_payments_left_after_skipping(fake: FakePayments) -> None:
    fake.add(memo="inv_1", amount="1", successful=False)
    fake.add_transaction([fake.create_account("1")])
    page = PaymentsClient(fake.url).page("", limit=2)
    assert page.payments == [] and page.full


def test_a_malformed_payment_record_is_a_payments_api_error() -> None:
    from onceonly_app.billing.payments_api import _payment

    record = {"id": "1", "paging_token": "1", "transaction_hash": "h", "type": "payment", "to": "G",
              "asset_type": "native", "created_at": "2026-11-20T08:15:00Z"}
    with pytest.raises(PaymentsApiError, match="amount"):
        _payment({**record, "amount": "lots"})
    with pytest.raises(PaymentsApiError, match="amount"):
        _payment({**record, "amount": "-1"})
    with pytest.raises(PaymentsApiError, match="malformed"):
        _payment({"id": "1", "amount": "1"})
    with pytest.raises(PaymentsApiError, match="malformed"):
        _payment({**record, "amount": "1", "asset_type": "credit_alphanum4", "asset_code": "USD"})  # no issuer


def test_http_errors_and_non_json_are_payments_api_errors(fake: FakePayments) -> None:
    with pytest.raises(PaymentsApiError, match="404"):
        PaymentsClient(fake.url + "/nowhere").page("")
    with pytest.raises(PaymentsApiError, match="400"):
        PaymentsClient(fake.url).page("not-a-number")


class RecordingSession(requests.Session):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict[str, Any]] = []

    def get(self, url: str | bytes, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        self.calls.append(kwargs)
        return super().get(url, **kwargs)


def test_every_request_has_a_timeout_and_no_redirects(fake: FakePayments) -> None:
    session = RecordingSession()
    PaymentsClient(fake.url, session=session).page("")
    PaymentsClient(fake.url, session=session).page("", timeout=2.0)  # what is left of the invocation
    timeouts = [c["timeout"] for c in session.calls]  # the root and the page, twice
    assert timeouts[:2] == [(3.05, 10.0), (3.05, 10.0)]
    assert all(1.0 < t <= 2.0 for t in (*timeouts[2], *timeouts[3]))  # one deadline for both
    assert timeouts[3][0] < timeouts[2][0]
    assert len(timeouts) == 4 and all(c["allow_redirects"] is False for c in session.calls)


def test_a_trickling_answer_is_abandoned_at_the_deadline(fake: FakePayments) -> None:
    """Read timeouts apply per socket read: a server sending a byte every 0.2 s
    never trips one. The deadline bounds the whole request."""
    for n in range(20):
        fake.add(memo=f"inv_{n}", amount="1")
    fake.trickle(chunk_bytes=16, every_seconds=0.2)  # the page takes minutes this way
    started = time.monotonic()
    with pytest.raises(PaymentsApiError, match="deadline"):
        PaymentsClient(fake.url).page("", timeout=1.0)
    assert time.monotonic() - started < 3 * 1.0  # the deadline plus at most one read, generously


def test_a_page_says_how_far_it_read_the_ledger(fake: FakePayments) -> None:
    """A full page: up to its last record's ledger time (later records may be
    on the next page). The end of the history: up to the source's own
    ingestion point (the root resource's latest closed ledger)."""
    first, second = datetime(2026, 11, 20, 8, 0, tzinfo=UTC), datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    fake.add(memo=None, amount="1", created_at=first)
    fake.add(memo=None, amount="1", created_at=second)
    client = PaymentsClient(fake.url)
    full = client.page("", limit=1)
    before = datetime.now(UTC)
    end = client.page(full.next_cursor, limit=5)
    empty = client.page(end.next_cursor, limit=5)
    after = datetime.now(UTC)
    assert full.full and full.read_to == first
    for page in (end, empty):  # the ledger closes once a second
        assert page.read_to is not None and page.read_to == page.ingested_to
        assert before - timedelta(seconds=1) <= page.read_to <= after


def test_the_ledgers_clock_decides_how_far_the_end_of_the_history_is(fake: FakePayments) -> None:
    """The ledger's own time, not our clock: a ledger behind our clock has not
    been read past its own time."""
    ledger_now = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
    fake.clock = ledger_now
    fake.add(memo=None, amount="1", created_at=ledger_now - timedelta(hours=1))
    fake.add(memo=None, amount="1", created_at=ledger_now + timedelta(hours=1))  # its ledger has not closed
    page = PaymentsClient(fake.url).page("")
    assert len(page.payments) == 1 and page.read_to == ledger_now
    fake.down = True
    with pytest.raises(PaymentsApiError, match="503"):
        PaymentsClient(fake.url).page(page.next_cursor)


def test_a_stalled_source_is_read_only_up_to_where_it_stalled(fake: FakePayments) -> None:
    """Up, answering "nothing new" with a current Date, but its ingestion
    stopped an hour ago: the page has read the ledger up to there, and says it
    lags an hour; a payment made since is not in it and not read past."""
    now = datetime.now(UTC).replace(microsecond=0)
    fake.stalled_at = now - timedelta(hours=1)
    fake.add(memo="inv_1", amount="1", created_at=now - timedelta(minutes=10))  # not ingested yet
    page = PaymentsClient(fake.url).page("")
    assert page.payments == [] and page.read_to == fake.stalled_at
    assert page.lag is not None and timedelta(minutes=59) < page.lag < timedelta(minutes=61)
    fake.stalled_at = None  # ingestion catches up
    caught_up = PaymentsClient(fake.url).page("")
    assert len(caught_up.payments) == 1 and caught_up.read_to is not None and caught_up.read_to >= now
    assert caught_up.lag is not None and caught_up.lag < timedelta(seconds=5)


class LaggingPageServer(requests.Session):
    """The root answered by an up-to-date server, the page by one whose
    Latest-Ledger is older (servers behind one load balancer)."""

    def get(self, url: str | bytes, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        response = super().get(url, **kwargs)
        if str(url).endswith("/payments"):
            response.headers["Latest-Ledger"] = str(int(response.headers["Latest-Ledger"]) - 600)
        return response


def test_a_page_from_a_server_behind_the_root_reads_no_further_than_its_records(fake: FakePayments) -> None:
    when = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
    fake.add(memo=None, amount="1", created_at=when)
    page = PaymentsClient(fake.url, session=LaggingPageServer()).page("")
    assert len(page.payments) == 1 and page.read_to == when and page.ingested_to is None
    empty = PaymentsClient(fake.url, session=LaggingPageServer()).page(page.next_cursor)
    assert empty.read_to is None


def test_an_account_feed_lists_only_that_accounts_payments(fake: FakePayments) -> None:
    other = random_account()
    mine = fake.add(memo="inv_1", amount="1")
    fake.add(memo="inv_2", amount="2", to=other)
    page = PaymentsClient(fake.url).page("", account=fake.receiver)
    assert [p.payment_id for p in page.payments] == [mine["id"]]
    assert [p.to_account for p in PaymentsClient(fake.url).page("", account=other).payments] == [other]
