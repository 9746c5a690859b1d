"""Store URL options: every store refuses an option it does not know the same
way, here, before anything is sent. Each store's ``options.py`` lists what
it accepts (docs/coordination.md, "Store URL options")."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from ..errors import ConfigError


def refuse_unknown(store: str, given: Iterable[str], accepted: Collection[str],
                   notes: Mapping[str, str] | None = None) -> None:
    """Raise ConfigError, one line, for the first name of ``given`` that is not
    in ``accepted``: ``unknown <store> URL option 'NAME'; accepted: …``
    (``notes``: a word on why, per refused name, e.g. an option that needs TLS)."""
    for name in given:
        if name not in accepted:
            note = (notes or {}).get(name, "")
            raise ConfigError(f"unknown {store} URL option {name!r}{note}; accepted: {', '.join(sorted(accepted))}")
