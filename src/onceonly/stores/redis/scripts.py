"""The store's Lua scripts (``lua/NAME.lua``), read once at import: each as
registered (``lua/common.lua``'s helpers, then its own file), with the
eviction guard in front for a store that does not allow eviction."""

from __future__ import annotations

import hashlib
from pathlib import Path

LUA = Path(__file__).with_name("lua")
SCRIPT_NAMES = (
    "acquire", "renew", "release", "complete", "inspect",
    "put", "cancel", "claim", "retry", "depth", "put_if_absent",
    "take_permit", "return_permit",
)
# Scripts that only read: no WAIT after them in durable mode.
READ_ONLY_SCRIPTS = frozenset({"inspect", "depth"})


def script_file(name: str) -> str:
    """The text of ``lua/NAME.lua``."""
    return (LUA / f"{name}.lua").read_text(encoding="utf-8")


# Each script as registered: the shared helpers, then the script's own file.
SCRIPT_SOURCES: dict[str, str] = {name: script_file("common") + script_file(name) for name in SCRIPT_NAMES}
# Put before each script unless eviction is allowed: the policy is read in
# the same atomic step as every write (lua/eviction_guard.lua).
EVICTION_GUARD = script_file("eviction_guard")
EVICTION_REFUSED = "ONCEONLY_EVICTION "


def script_source(name: str, *, guarded: bool) -> str:
    """The source registered for script ``name``: with the eviction guard in
    front for a store that does not allow eviction."""
    return (EVICTION_GUARD if guarded else "") + SCRIPT_SOURCES[name]


def sha(source: str) -> str:
    """The SHA1 that EVALSHA names a script by (what register_script computes)."""
    return hashlib.sha1(source.encode("utf-8")).hexdigest()
