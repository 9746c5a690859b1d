"""Which assets pay which invoice currency.

An asset on a Stellar-style ledger is its code AND its issuer: anyone can issue
a token named "USD", so the code alone proves nothing. The accepted assets are
configured per currency (``PAYMENTS_ACCEPTED_ASSETS``)::

    USD=USDC:GA5ZSEJYB37JRC5AVCIA5MOP4RHTM335X2KGX3IHOJAPP5RE34K4KZVN EUR=EURC:GDHU6W…

entries separated by spaces or commas, one ``CURRENCY=ASSET`` each (CURRENCY: a
three-letter ISO 4217 code, any case, used upper case), where ASSET
is ``native`` (the ledger's own coin) or ``CODE:ISSUER``. A currency may accept
several assets; an asset pays exactly one currency. Amounts convert one to one
(a USD stablecoin unit pays one dollar)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from onceonly.errors import ConfigError

ACCOUNT_ID = re.compile(r"G[A-Z2-7]{55}")  # a Stellar public key (strkey); payment_accounts checks the same
ASSET_CODE = re.compile(r"[A-Za-z0-9]{1,12}")
CURRENCY = re.compile(r"[A-Z]{3}")


@dataclass(frozen=True)
class Asset:
    code: str | None  # None: the native asset
    issuer: str | None

    @classmethod
    def native(cls) -> Asset:
        return cls(None, None)

    def __str__(self) -> str:
        return "native" if self.code is None else f"{self.code}:{self.issuer}"


def parse_asset(text: str) -> Asset:
    """``native`` or ``CODE:ISSUER``. Raises ConfigError."""
    if text == "native":
        return Asset.native()
    code, _, issuer = text.partition(":")
    if not ASSET_CODE.fullmatch(code) or not ACCOUNT_ID.fullmatch(issuer):
        raise ConfigError(f"asset {text!r} is not 'native' or CODE:ISSUER (a 1-12 character code and a "
                          "G… account id of 56 characters)")
    return Asset(code, issuer)


@dataclass(frozen=True)
class AcceptedAssets:
    currency_of_asset: Mapping[Asset, str]

    @classmethod
    def parse(cls, text: str) -> AcceptedAssets:
        """Parse the ``CURRENCY=ASSET …`` list. Raises ConfigError."""
        currency_of: dict[Asset, str] = {}
        for entry in text.replace(",", " ").split():
            currency, sep, asset_text = entry.partition("=")
            currency = currency.upper()  # stored upper case, like the invoices' (0006 migration)
            if not sep or not CURRENCY.fullmatch(currency):
                raise ConfigError(f"accepted asset {entry!r} is not CURRENCY=ASSET (e.g. USD=USDC:G…)")
            asset = parse_asset(asset_text)
            if currency_of.setdefault(asset, currency) != currency:
                raise ConfigError(f"asset {asset} is accepted for both {currency_of[asset]} and {currency}; "
                                  "an asset pays one currency")
        if not currency_of:
            raise ConfigError("no accepted assets: list at least one CURRENCY=ASSET")
        return cls(currency_of)

    def currency_of(self, asset: Asset) -> str | None:
        """The currency ``asset`` pays, or None if it is not accepted."""
        return self.currency_of_asset.get(asset)
