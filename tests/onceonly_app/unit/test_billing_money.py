"""Money by the currency's minor unit, and which assets pay which currency."""

from __future__ import annotations

from decimal import Decimal

import pytest

import onceonly
from onceonly_app.billing.assets import AcceptedAssets, Asset
from onceonly_app.billing.config import PaymentWatcherSettings
from onceonly_app.billing.money import due_money, format_money, to_minor
from onceonly_cli.testing.fake_payments import random_account

ISSUER = random_account()


@pytest.mark.parametrize(("minor", "currency", "shown"), [
    (123456, "USD", "1,234.56 USD"),
    (123456, "JPY", "123,456 JPY"),  # no minor unit: yen, not hundredths of a yen
    (123456, "KWD", "123.456 KWD"),  # three places: fils
    (5, "EUR", "0.05 EUR"),
    (10**17 + 1, "USD", "1,000,000,000,000,000.01 USD"),  # a float would round the last cent away
])
def test_money_is_formatted_by_the_currencys_minor_unit(minor: int, currency: str, shown: str) -> None:
    assert format_money(minor, currency) == shown


@pytest.mark.parametrize(("amount", "currency", "minor"), [
    ("12.3456789", "USD", "1234.56789"), ("1500.9", "JPY", "1500.9"), ("1.2345", "KWD", "1234.5"),
    ("0.0000001", "USD", "0.00001"), ("0.1", "USD", "10"), ("0.0000001", "XLM", "1"),
])
def test_amounts_convert_to_minor_units_exactly(amount: str, currency: str, minor: str) -> None:
    assert to_minor(Decimal(amount), currency) == Decimal(minor)


def test_sub_cent_parts_add_up_exactly() -> None:
    assert to_minor(Decimal("50.005"), "USD") + to_minor(Decimal("49.995"), "USD") == 100_00
    assert sum(to_minor(Decimal("0.0000001"), "USD") for _ in range(100_000)) == 1


@pytest.mark.parametrize(("minor", "received", "due"), [
    (Decimal("4999.5"), "49.99 USD", "50.00 USD"),  # received rounds down, still due rounds up
    (Decimal("0.00001"), "0.00 USD", "0.01 USD"),
    (Decimal("1234"), "12.34 USD", "12.34 USD"),  # whole minor units are shown as they are
])
def test_a_fraction_of_a_cent_is_rounded_once_for_display(minor: Decimal, received: str, due: str) -> None:
    assert format_money(minor, "USD") == received
    assert due_money(minor, "USD") == due


def test_accepted_assets_are_code_and_issuer_per_currency() -> None:
    other = random_account()
    accepted = AcceptedAssets.parse(f"USD=USDC:{ISSUER}, USD=USD:{other} EUR=EURC:{ISSUER} XLM=native")
    assert accepted.currency_of(Asset("USDC", ISSUER)) == "USD"
    assert accepted.currency_of(Asset("USD", other)) == "USD"
    assert accepted.currency_of(Asset("USD", ISSUER)) is None  # the right code from the wrong issuer
    assert accepted.currency_of(Asset("EURC", ISSUER)) == "EUR"
    assert accepted.currency_of(Asset.native()) == "XLM"


def test_an_accepted_currency_is_used_upper_case() -> None:
    assert AcceptedAssets.parse(f"usd=USDC:{ISSUER}").currency_of(Asset("USDC", ISSUER)) == "USD"


@pytest.mark.parametrize(("text", "complaint"), [
    ("", "no accepted assets"),
    ("USDC", "CURRENCY=ASSET"),
    ("US=native", "CURRENCY=ASSET"),
    ("U$D=native", "CURRENCY=ASSET"),
    ("USD=USDC", "CODE:ISSUER"),  # no issuer: anyone could issue it
    ("USD=USDC:GNOTANACCOUNT", "CODE:ISSUER"),
    # an id of its own: ISSUER is random, and every xdist worker must collect the same ids
    pytest.param(f"USD=USDC:{ISSUER} EUR=USDC:{ISSUER}", "one currency", id="one asset for two currencies"),
])
def test_bad_accepted_assets_are_config_errors(text: str, complaint: str) -> None:
    with pytest.raises(onceonly.ConfigError, match=complaint):
        AcceptedAssets.parse(text)


def test_the_watcher_requires_accepted_assets_and_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYMENTS_API_URL", "http://127.0.0.1:1/")
    monkeypatch.setenv("WEBHOOK_QUEUE_URL", "http://127.0.0.1:1/queue")
    monkeypatch.delenv("PAYMENTS_ACCEPTED_ASSETS", raising=False)
    with pytest.raises(onceonly.ConfigError, match="PAYMENTS_ACCEPTED_ASSETS"):
        PaymentWatcherSettings.from_env()
    monkeypatch.setenv("PAYMENTS_ACCEPTED_ASSETS", "USD=USD")
    with pytest.raises(onceonly.ConfigError, match="PAYMENTS_ACCEPTED_ASSETS: asset 'USD'"):
        PaymentWatcherSettings.from_env()
    monkeypatch.setenv("PAYMENTS_ACCEPTED_ASSETS", f"USD=USD:{ISSUER}")
    assert PaymentWatcherSettings.from_env().accepted_assets.currency_of(Asset("USD", ISSUER)) == "USD"
