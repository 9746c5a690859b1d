"""The SSRF guard: check a webhook URL and pin the address that was checked.

``check_target`` resolves the host ONCE and refuses the URL if any resolved
address is not a public unicast address. The sender then connects to that very
address (see sender.py), so a DNS answer that changes between the check and
the connect (DNS rebinding) cannot reach an internal service."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from onceonly_app.runtime.budget import Budget, DeadlineExceededError

from .urls import encoded_url
from .watchdog import resolve_within

Resolver = Callable[..., list[Any]]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
NAT64 = ipaddress.ip_network("64:ff9b::/96")


class UnsafeTargetError(ValueError):
    """The URL is refused before any connection: bad scheme, or an address that
    is private, loopback, link-local, multicast, reserved, unspecified or mapped."""


@dataclass(frozen=True)
class Target:
    """A checked URL: connect to ``address``, speak to ``host`` (Host header, TLS SNI
    and certificate check)."""

    scheme: str
    host: str
    port: int
    address: str
    path: str  # path and query, e.g. "/hooks/1?x=y"

    @property
    def pinned_url(self) -> str:
        """The URL with the checked address in place of the host name."""
        literal = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.scheme}://{literal}:{self.port}{self.path}"

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        name = f"[{self.host}]" if ":" in self.host else self.host
        return name if self.port == default else f"{name}:{self.port}"


def refusal_reason(address: IPAddress) -> str | None:
    """Why ``address`` may not be reached from a webhook, or None if it is public."""
    if isinstance(address, ipaddress.IPv6Address):
        mapped = address.ipv4_mapped
        if mapped is not None:
            inner = refusal_reason(mapped)
            return f"IPv4-mapped IPv6 address of {mapped}" + (f" ({inner})" if inner else "")
        embedded = _embedded_ipv4(address)
        if embedded is not None and (inner := refusal_reason(embedded)):
            return f"IPv6 address embedding {embedded} ({inner})"
    checks = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("reserved", address.is_reserved),
        ("private", address.is_private),
        ("not globally routable", not address.is_global),
    )
    return next((name for name, hit in checks if hit), None)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address carried by a 6to4, Teredo or NAT64 address."""
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def check_target(url: str, allow_http_hosts: Collection[str] = (),
                 resolver: Resolver | None = None, deadline: Budget | None = None) -> Target:
    """Validate ``url`` and resolve its host once. Returns the Target to connect
    to; raises UnsafeTargetError before any connection is made, and
    UnresolvableHostError when DNS gives no answer (by ``deadline``, if given).

    A host in ``allow_http_hosts`` (lower case) may use plain http and private
    or loopback addresses: that is how tests reach a receiver on 127.0.0.1.

    The URL is encoded first (urls.py: IDNA host, percent-encoded path), so
    the Target holds what the request sends; UnencodableURLError if it cannot be."""
    url = encoded_url(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeTargetError(f"malformed URL: {exc}") from exc
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        raise UnsafeTargetError("URL has no host")
    if parts.username or parts.password:
        raise UnsafeTargetError("URL must not carry credentials")
    allowed_host = host in allow_http_hosts
    if scheme != "https" and not (scheme == "http" and allowed_host):
        raise UnsafeTargetError(f"scheme {scheme or '(none)'!r} refused: https is required for host {host!r}")
    port = port or (443 if scheme == "https" else 80)
    resolve = resolver or socket.getaddrinfo
    try:
        if deadline is None or _is_address(host):
            # An address literal needs no lookup: getaddrinfo parses it at once,
            # so it needs no thread to be cut short by the deadline.
            infos = resolve(host, port, type=socket.SOCK_STREAM)
        else:
            infos = resolve_within(resolve, host, port, deadline)
    except (socket.gaierror, UnicodeError, DeadlineExceededError) as exc:
        raise UnresolvableHostError(f"cannot resolve {host!r}: {exc}") from exc
    # sockaddr[0] is the address text; a scoped IPv6 one carries "%zone".
    addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos))
    if not addresses:
        raise UnresolvableHostError(f"{host!r} resolved to no address")
    if not allowed_host:
        # ANY bad address refuses the URL: checking only the first would let a
        # host list a public and a private address and win on a later lookup.
        for address in addresses:
            reason = refusal_reason(address)
            if reason:
                raise UnsafeTargetError(f"{host!r} resolves to {address}: {reason}")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(scheme=scheme, host=host, port=port, address=str(addresses[0]), path=path)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class UnresolvableHostError(OSError):
    """DNS gave no answer: a transient failure, retried like a refused connection."""
