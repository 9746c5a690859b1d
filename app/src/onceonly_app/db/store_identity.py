"""Which coordination store this is: its kind and an id the store itself
keeps. The URL alone cannot tell: the same table name after `sam delete` +
`sam deploy`, or a replaced table, is a new, empty store; a PgBouncer in front
of the same server, or a rotated password, is the same one. So the id is a
marker lease the store holds (``MARKER``): its owner is random per grant, and
a new or emptied store has none until this code grants it."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import onceonly
from onceonly import MAX_SECONDS

MARKER = "onceonly:store-instance"  # a lease name no job or delivery uses
MARKER_SECONDS = MAX_SECONDS  # held for ten years: never released, so its owner stays the store's id
LOCATION_OPTIONS = ("prefix", "region", "endpoint_url")  # the URL options that say where, not how


@dataclass(frozen=True)
class StoreIdentity:
    kind: str  # postgresql | redis | dynamodb
    instance: str  # the marker's owner: the same as long as the store keeps its data
    location: str  # the URL without credentials, for people (not compared)

    def same_store(self, kind: str | None, instance: str | None) -> bool:
        return self.kind == kind and self.instance == instance

    def __str__(self) -> str:
        return f"{self.kind} store {self.location} (instance {self.instance[:12]})"


def identify(store: onceonly.Store, url: str) -> StoreIdentity:
    """The store's identity, granting its marker if it has none yet (a new or
    emptied store). Safe from many processes at once: the marker is a lease, so
    one grant wins and every caller reads the winner's owner."""
    state = store.inspect(MARKER)
    if state is None or not state.owner:
        store.acquire(MARKER, ttl=MARKER_SECONDS)  # None if a concurrent setup won: its owner is read below
        state = store.inspect(MARKER)
    if state is None or not state.owner:
        raise onceonly.OnceOnlyError(f"the store lost its {MARKER} marker right after it was granted "
                                     "(evicted? a store that keeps leases for ten years is needed)")
    return StoreIdentity(str(getattr(store, "kind", type(store).__name__)), state.owner, location(url))


def location(url: str) -> str:
    """``url`` without user, password or options other than where the store is."""
    parts = urlsplit(url.strip())
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port:
        netloc += f":{parts.port}"
    query = urlencode([(key, value) for key, value in parse_qsl(parts.query) if key in LOCATION_OPTIONS])
    return urlunsplit((parts.scheme.lower(), netloc, parts.path, query, ""))
