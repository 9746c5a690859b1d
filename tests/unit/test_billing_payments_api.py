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
from onceonly_app.billing.payments_api import LEDGER_LAG, PaymentsApiError, PaymentsClient
from onceonly_cli.fake_payments import FakePayments, random_account


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
    assert fake.requests == [{"cursor": "", "order": "asc", "limit": "1"}]
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
    assert [c["timeout"] for c in session.calls] == [(3.05, 10.0), (2.0, 2.0)]
    assert all(c["allow_redirects"] is False for c in session.calls)


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
    on the next page). The end of the history: up to the request's time less
    the ledger's ingestion lag."""
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
    for page in (end, empty):  # the server's Date has whole seconds
        assert page.read_to is not None
        assert before - LEDGER_LAG - timedelta(seconds=1) <= page.read_to <= after - LEDGER_LAG


def test_the_ledgers_clock_decides_how_far_the_end_of_the_history_is(fake: FakePayments) -> None:
    """The server's Date, not our clock, when it is earlier: a ledger behind
    our clock has not been read past its own time."""
    ledger_now = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
    fake.clock = ledger_now
    fake.add(memo=None, amount="1", created_at=ledger_now - timedelta(hours=1))
    fake.add(memo=None, amount="1", created_at=ledger_now + timedelta(hours=1))  # its ledger has not closed
    page = PaymentsClient(fake.url).page("")
    assert len(page.payments) == 1 and page.read_to == ledger_now - LEDGER_LAG
    fake.down = True
    with pytest.raises(PaymentsApiError, match="503"):
        PaymentsClient(fake.url).page(page.next_cursor)
