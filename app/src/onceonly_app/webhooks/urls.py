"""A webhook URL as a request can carry it: the host IDNA-encoded (ASCII, what
DNS, the Host header and the TLS SNI all get), the path, query and fragment
percent-encoded (UTF-8) where they hold what a request line cannot (a space,
DEL, a control or non-ASCII character, a stray ``%``). Existing ``%XX``
escapes are kept, so encoding an encoded URL changes nothing.

`subscriptions add/update` store the encoded URL (or refuse one that cannot be
encoded, writing nothing); the SSRF guard encodes again at every attempt, so a
URL stored before this existed is sent encoded too, or fails that attempt with
the reason (never a crash)."""

from __future__ import annotations

import functools
import ipaddress
import re
from urllib.parse import SplitResult, quote, urlsplit, urlunsplit

# Kept as they are in a path (RFC 3986 pchar and "/"); anything else is encoded.
PATH_SAFE = "/:@!$&'()*+,;=%"
QUERY_SAFE = PATH_SAFE + "?"
LINE_BREAKS = re.compile(r"[\t\r\n]")
STRAY_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
HOST_FORBIDDEN = re.compile(r"[\x00-\x20\x7f%/\\?#@\[\]]")


class UnencodableURLError(ValueError):
    """The URL's host cannot be put in a request: not a valid domain name,
    internationalised domain name or IP literal. The message says why in one line."""


@functools.lru_cache(maxsize=4096)  # the guard encodes a subscription's URL at every attempt
def encoded_url(url: str) -> str:
    """``url`` with its host IDNA-encoded and lower case, and its path, query and
    fragment percent-encoded. A URL that does not parse is returned unchanged
    (the SSRF guard refuses it with its own reason). Raises UnencodableURLError."""
    if LINE_BREAKS.search(url):
        # urlsplit would silently drop them, and the URL sent would not be the one given.
        raise UnencodableURLError("the URL holds a tab or a line break")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return url
    if not parts.hostname:
        return url
    host = encoded_host(parts.hostname, bracketed="[" in parts.netloc)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = (f"{userinfo}@" if userinfo else "") + host + ("" if port is None else f":{port}")
    return urlunsplit(SplitResult(parts.scheme.lower(), netloc, _encoded(parts.path, PATH_SAFE),
                                  _encoded(parts.query, QUERY_SAFE), _encoded(parts.fragment, QUERY_SAFE)))


def encoded_host(host: str, *, bracketed: bool = False) -> str:
    """The host as DNS and the Host header take it: an IP literal as is (an
    IPv6 one in brackets), a name IDNA-encoded (UTS 46), lower case."""
    if bracketed:
        try:
            return f"[{ipaddress.IPv6Address(host.split('%')[0])}]"
        except ValueError:
            raise UnencodableURLError(f"host [{host}] is not an IPv6 address") from None
    if HOST_FORBIDDEN.search(host):
        raise UnencodableURLError(f"host {host!r} holds a character no host name can have")
    if host.isascii():
        return host.lower()
    import idna  # only for an internationalised name: requests' own dependency, in the layer

    try:
        return str(idna.encode(host, uts46=True).decode("ascii"))
    except idna.IDNAError as exc:
        raise UnencodableURLError(f"host {host!r} is not a valid internationalised domain name: {exc}") from None


def _encoded(text: str, safe: str) -> str:
    """Percent-encode what a request line cannot carry; keep %XX escapes."""
    return quote(STRAY_PERCENT.sub("%25", text), safe=safe)
