"""Money in minor units: ``amount_cents`` columns hold the currency's smallest
unit (cents for USD, yen for JPY, fils for KWD). Exact decimals only: never a
float, which cannot hold 0.1 and rounds large amounts.

An invoice's amount is whole minor units. A received amount is kept exactly,
as a fraction of the minor unit where it has one (Stellar amounts have 7
decimals: 50.005 USDC is 5000.5 cents), so partial payments add up to exactly
what was paid. Rounding happens once, only when an amount is shown: what was
received rounds down (never shows more than arrived), what is still due
rounds up (paying what is shown always settles)."""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

# ISO 4217 currencies whose minor unit is not 2 decimal places; every other
# currency code has 2. XLM (not ISO) is Stellar's native asset, 7 places.
MINOR_UNITS = {
    **dict.fromkeys(("BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI",
                     "VND", "VUV", "XAF", "XOF", "XPF"), 0),
    **dict.fromkeys(("BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"), 3),
    **dict.fromkeys(("CLF", "UYW"), 4),
    "XLM": 7,
}


def minor_unit(currency: str) -> int:
    """Decimal places of ``currency``'s minor unit (JPY 0, USD 2, KWD 3)."""
    return MINOR_UNITS.get(currency.upper(), 2)


def format_money(minor: int | Decimal, currency: str, rounding: str = ROUND_FLOOR) -> str:
    """``format_money(123456, "USD")`` -> ``"1,234.56 USD"``; JPY -> ``"123,456 JPY"``;
    KWD -> ``"123.456 KWD"``. A fraction of the minor unit is rounded by
    ``rounding`` (down by default: a received amount; see due_money)."""
    places = minor_unit(currency)
    whole = Decimal(minor).to_integral_value(rounding=rounding)
    return f"{whole.scaleb(-places):,.{places}f} {currency}"


def due_money(minor: int | Decimal, currency: str) -> str:
    """An amount still due, shown rounded UP to the minor unit: 0.005 USD
    still due shows as 0.01 USD, so paying what is shown settles."""
    return format_money(minor, currency, ROUND_CEILING)


def to_minor(amount: Decimal, currency: str) -> Decimal:
    """``amount`` in minor units of ``currency``, exactly (a shift of the decimal
    point: 50.005 USD is 5000.5 cents). Never rounded: see the module docstring."""
    return amount.scaleb(minor_unit(currency))
