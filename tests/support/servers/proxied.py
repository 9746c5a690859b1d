"""Store URLs rerouted through a FaultProxy: where each backend's port sits in
its URL, and the ``timeout`` option onceonly reads on every scheme."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


def _with_port(netloc: str, port: int) -> str:
    userinfo, _, _ = netloc.rpartition("@")
    return f"{userinfo}@127.0.0.1:{port}" if userinfo else f"127.0.0.1:{port}"


def target_port(store_url: str) -> int:
    """The port of the server a store URL points at."""
    parts = urlsplit(store_url)
    if parts.scheme == "dynamodb":
        endpoint = dict(parse_qsl(parts.query))["endpoint_url"]
        port = urlsplit(endpoint).port
    else:
        port = parts.port
    assert port is not None, f"no port in {store_url!r}"
    return port


def through(store_url: str, port: int, timeout: float) -> str:
    """``store_url`` pointed at 127.0.0.1:``port`` (a proxy), with ``?timeout=``."""
    parts = urlsplit(store_url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "timeout"] + [("timeout", f"{timeout:g}")]
    if parts.scheme == "dynamodb":
        query = [(k, f"http://127.0.0.1:{port}" if k == "endpoint_url" else v) for k, v in query]
        return urlunsplit(parts._replace(query=urlencode(query)))
    return urlunsplit(parts._replace(netloc=_with_port(parts.netloc, port), query=urlencode(query)))
