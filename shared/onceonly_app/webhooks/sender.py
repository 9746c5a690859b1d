"""POST one signed webhook with a requests Session, to the address the SSRF guard
checked.

The URL is rewritten to the checked IP; the Host header, the TLS SNI
(``server_hostname``) and the certificate check (``assert_hostname``) keep the
real host name. Redirects are never followed (a 3xx could point inside), proxies
from the environment are ignored, and every request has connect and read
timeouts. The response body is read up to a small limit, for the error text."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import requests
import urllib3
from requests.adapters import HTTPAdapter

from .backoff import RETRY_AFTER_STATUSES, parse_retry_after
from .ssrf import Target

USER_AGENT = "onceonly-webhooks/0.1"
MAX_ERROR_BODY = 512
MAX_ADAPTERS = 64  # pinned (host, address) connection pools kept per container


class PinnedHostAdapter(HTTPAdapter):
    """Connection pools that dial an IP literal but speak TLS to ``host``."""

    def __init__(self, host: str, **kwargs: Any) -> None:
        self.host = host
        super().__init__(**kwargs)

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False,
                         **pool_kwargs: Any) -> None:
        # urllib3 drops both keywords for plain-http pools.
        pool_kwargs.update(server_hostname=self.host, assert_hostname=self.host)
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)


@dataclass(frozen=True)
class SendResult:
    status_code: int | None  # None: no HTTP response (timeout, refused connection, …)
    error: str | None  # short reason on failure; never the request body
    retry_after: float | None = None
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


class WebhookSender:
    """One per container: keeps a keep-alive pool per checked (host, address)."""

    def __init__(self, connect_timeout: float, read_timeout: float, ca_bundle: str | None = None) -> None:
        self.timeout = (connect_timeout, read_timeout)
        self.verify: bool | str = ca_bundle or True
        self.session = requests.Session()
        self.session.trust_env = False  # no proxies or netrc from the environment
        self._adapters: OrderedDict[tuple[str, str, int], PinnedHostAdapter] = OrderedDict()

    def _adapter(self, target: Target) -> PinnedHostAdapter:
        key = (target.host, target.address, target.port)
        adapter = self._adapters.pop(key, None) or PinnedHostAdapter(target.host, max_retries=0)
        self._adapters[key] = adapter
        while len(self._adapters) > MAX_ADAPTERS:
            self._adapters.popitem(last=False)[1].close()
        return adapter

    def post(self, target: Target, body: str, headers: dict[str, str]) -> SendResult:
        request = requests.Request(
            "POST", target.pinned_url, data=body.encode("utf-8"),
            headers={**headers, "Host": target.host_header, "Content-Type": "application/json",
                     "User-Agent": USER_AGENT},
        )
        prepared = self.session.prepare_request(request)
        started = time.monotonic()
        try:
            # Adapter.send never follows redirects (only Session.send does).
            response = self._adapter(target).send(prepared, stream=True, timeout=self.timeout, verify=self.verify)
        except requests.Timeout as exc:
            return SendResult(None, f"timeout: {exc.__class__.__name__}", elapsed=time.monotonic() - started)
        except requests.RequestException as exc:
            return SendResult(None, f"connection failed: {exc.__class__.__name__}",
                              elapsed=time.monotonic() - started)
        try:
            status = response.status_code
            retry_after = None
            if status in RETRY_AFTER_STATUSES:
                retry_after = parse_retry_after(response.headers.get("Retry-After"), time.time())
            error = None if 200 <= status < 300 else f"HTTP {status}: {_snippet(response)}"
            return SendResult(status, error, retry_after, time.monotonic() - started)
        finally:
            response.close()

    def close(self) -> None:
        for adapter in self._adapters.values():
            adapter.close()
        self._adapters.clear()
        self.session.close()


def _snippet(response: requests.Response) -> str:
    try:
        raw = response.raw.read(MAX_ERROR_BODY, decode_content=True) or b""
    except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
        return f"(body unreadable: {exc.__class__.__name__})"
    return raw.decode("utf-8", "replace").strip()[:MAX_ERROR_BODY] or "(empty body)"
