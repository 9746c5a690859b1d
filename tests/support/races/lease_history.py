"""Checks of a lease race's recorded holdings (events ``held`` with name,
token, start and end on the holder's clock), shared by the races."""

from __future__ import annotations

from collections import defaultdict
from typing import Any


def check_holdings(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """No token granted twice per name, and no two holdings of a name at once
    (a later token is granted only after the earlier holder let go); the
    ``held`` events, after checking that some acquire met a held name."""
    held = [e for e in events if e["event"] == "held"]
    assert any(e["event"] == "contended" for e in events), "no acquire met a held name: no race happened"
    by_name = defaultdict(list)
    for event in held:
        by_name[event["name"]].append(event)
    for name, holdings in by_name.items():
        tokens = [h["token"] for h in holdings]
        assert len(tokens) == len(set(tokens)), f"{name}: a token was granted twice"
        ordered = sorted(holdings, key=lambda h: h["token"])
        for earlier, later in zip(ordered, ordered[1:], strict=False):
            assert later["start"] >= earlier["end"], f"{name}: tokens {earlier['token']} and {later['token']} overlap"
    return held


def peak_holders(holdings: list[dict[str, Any]]) -> int:
    """The most holdings (``start``/``end`` on one machine's clock) open at one
    moment. Each holding was recorded inside the store's own holding (after
    the take returned, before the return was sent), so a peak above the limit
    here is one in the store too."""
    edges = sorted([(h["start"], 1) for h in holdings] + [(h["end"], -1) for h in holdings])
    open_now = peak = 0
    for _, step in edges:  # at one instant an end (-1) sorts before a start (+1)
        open_now += step
        peak = max(peak, open_now)
    return peak
