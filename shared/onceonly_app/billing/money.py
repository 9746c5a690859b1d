"""Money in minor units: ``amount_cents`` columns hold the currency's smallest
unit (cents for USD, yen for JPY, fils for KWD). Exact decimals only: never a
float, which cannot hold 0.1 and rounds large amounts."""

from __future__ import annotations

from decimal import ROUND_FLOOR, Decimal

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


def format_money(minor: int, currency: str) -> str:
    """``format_money(123456, "USD")`` -> ``"1,234.56 USD"``; JPY -> ``"123,456 JPY"``;
    KWD -> ``"123.456 KWD"``."""
    places = minor_unit(currency)
    return f"{Decimal(minor).scaleb(-places):,.{places}f} {currency}"


def to_minor(amount: Decimal, currency: str) -> int:
    """Whole minor units of ``amount``, rounded down: a remainder below the minor
    unit never credits an invoice with more than was paid."""
    return int(amount.scaleb(minor_unit(currency)).to_integral_value(rounding=ROUND_FLOOR))
