"""The payments client against the fake Horizon-style server: parsing, paging
parameters, timeouts, and clear errors for unusable answers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from onceonly_app.billing.payments_api import PaymentsApiError, PaymentsClient
from onceonly_cli.fake_payments import FakePayments


@pytest.fixture
def fake() -> Iterator[FakePayments]:
    with FakePayments() as server:
        yield server


def test_reads_a_page_in_cents_and_asks_for_ascending_order(fake: FakePayments) -> None:
    first = fake.add(memo="inv_1", amount="12.5")
    fake.add(memo=None, amount="0.01", asset_code="EUR")
    page = PaymentsClient(fake.url).page("", limit=1)
    assert [(p.transaction_hash, p.amount_cents, p.memo) for p in page.payments] == [
        (first["transaction_hash"], 1250, "inv_1")]
    assert page.next_cursor == first["paging_token"]
    assert fake.requests == [{"cursor": "", "order": "asc", "limit": "1"}]
    rest = PaymentsClient(fake.url).page(page.next_cursor)
    assert [(p.amount_cents, p.asset_code, p.memo) for p in rest.payments] == [(1, "EUR", None)]


def test_an_empty_page_keeps_the_cursor(fake: FakePayments) -> None:
    assert PaymentsClient(fake.url).page("4096").next_cursor == "4096"


def test_failed_transactions_are_skipped_but_advance_the_cursor(fake: FakePayments) -> None:
    failed = fake.add(memo="inv_1", amount="1", successful=False)
    page = PaymentsClient(fake.url).page("")
    assert page.payments == [] and page.next_cursor == failed["paging_token"]


def test_sub_cent_amounts_round_down(fake: FakePayments) -> None:
    fake.add(memo="inv_1", amount="12.3456789")
    assert [p.amount_cents for p in PaymentsClient(fake.url).page("").payments] == [1234]


def test_a_malformed_record_is_a_payments_api_error() -> None:
    from onceonly_app.billing.payments_api import _payment

    with pytest.raises(PaymentsApiError, match="amount"):
        _payment({"id": "1", "paging_token": "1", "transaction_hash": "h", "amount": "lots"})
    with pytest.raises(PaymentsApiError, match="malformed"):
        _payment({"id": "1", "amount": "1"})


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
    assert session.calls[0]["timeout"] == (3.05, 10.0)
    assert session.calls[0]["allow_redirects"] is False
