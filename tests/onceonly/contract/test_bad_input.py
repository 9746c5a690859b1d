"""Bad input fails the same way on every store: a ConfigError naming the
argument, before anything is written, never StoreUnavailableError (which tells
the caller to retry) and never a raw driver or Python error. Input at the
documented limits works on every store, so the limits really fit each key and
item size (docs/coordination.md)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

import onceonly
from onceonly.stores._common import MAX_CLAIM_LIMIT, MAX_EPOCH, MAX_NAME_BYTES, MAX_PAYLOAD_BYTES

NAN, INF = float("nan"), float("inf")
# One character each of 1, 2, 3 and 4 bytes in UTF-8.
WIDE = {1: "x", 2: "é", 3: "€", 4: "𝄞"}


def _id(value: object) -> str:
    return f"int-{len(str(value))}-digits" if isinstance(value, int) and value > 10**20 else repr(value)


def longest(width: int) -> str:
    return WIDE[width] * (MAX_NAME_BYTES // width)


def one_byte_too_long(width: int) -> str:
    return WIDE[width] * (MAX_NAME_BYTES // width) + "x" * (MAX_NAME_BYTES % width + 1)


# Bad names: (value, what the message must say). The last ones have no more
# characters than the limit has bytes: bytes are what overflow a DynamoDB key.
BAD_NAMES = [
    pytest.param(None, "non-empty string", id="None"),
    pytest.param(7, "non-empty string", id="int"),
    pytest.param(b"bytes", "non-empty string", id="bytes"),
    pytest.param("", "non-empty string", id="empty"),
    pytest.param("a\x00b", "NUL", id="NUL"),
    pytest.param("a\ud800b", "surrogate", id="high-surrogate"),
    pytest.param("\udcff", "surrogate", id="low-surrogate"),
    pytest.param(one_byte_too_long(1), "bytes", id="ascii-too-long"),
    pytest.param(one_byte_too_long(2), "bytes", id="2-byte-too-long"),
    pytest.param("𝄞" * 500, "bytes", id="4-byte-500-chars"),
]
BAD_SECONDS = [0, -1, NAN, INF, -INF, 1e300, 10**400, "10", None, True, [5]]
BAD_DUE_AT = [1e308, -1e308, NAN, INF, -INF, -1, MAX_EPOCH + 1, 2**63, 10**400, "tomorrow", True, [1]]
BAD_LIMITS = [0, -1, 1.5, True, "5", None, MAX_CLAIM_LIMIT + 1, 2**63]


def _cyclic() -> list[Any]:
    value: list[Any] = []
    value.append(value)
    return value


def _deep(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


BAD_PAYLOADS = [
    pytest.param(NAN, "NaN", id="nan"),
    pytest.param(INF, "Infinity", id="inf"),
    pytest.param({"nested": [1, -INF]}, "Infinity", id="nested-minus-inf"),
    pytest.param(object(), "JSON-serialisable", id="object"),
    pytest.param({1, 2}, "JSON-serialisable", id="set"),
    pytest.param(b"bytes", "JSON-serialisable", id="bytes"),
    pytest.param({"a": 1, 2: "b"}, "JSON-serialisable", id="unsortable-keys"),
    pytest.param(_cyclic(), "JSON-serialisable", id="cyclic"),
    pytest.param(_deep(100_000), "JSON-serialisable", id="too-deep"),
    pytest.param(10**5000, "JSON-serialisable", id="huge-int"),
    pytest.param({"s": "a\ud800"}, "surrogate", id="surrogate-value"),
    pytest.param({"\udc00": 1}, "surrogate", id="surrogate-key"),
    pytest.param({"s": "a\x00b"}, "NUL", id="NUL-value"),
    pytest.param({"a\x00": 1}, "NUL", id="NUL-key"),
    # The 450 kB: it failed only on DynamoDB, and as 'unavailable'.
    pytest.param("x" * (450 * 1000), "bytes", id="450kB"),
    pytest.param("x" * (MAX_PAYLOAD_BYTES - 1), "bytes", id="one-byte-over"),  # + 2 quotes
    pytest.param("é" * (MAX_PAYLOAD_BYTES // 2), "bytes", id="utf8-bytes-not-chars"),
]


def refuses(call: Callable[[], object], argument: str, *needles: str) -> onceonly.ConfigError:
    """``call`` raises a ConfigError (not 'unavailable', not a raw error) whose
    message names ``argument`` and says each of ``needles``."""
    with pytest.raises(onceonly.OnceOnlyError) as caught:
        call()
    error = caught.value
    assert type(error) is onceonly.ConfigError, f"{type(error).__name__}: {error}"
    message = str(error)
    assert argument in message, message
    for needle in needles:
        assert needle in message, message
    assert len(message) < 300, "a bad value must not be echoed whole"
    return error


# -- names --------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "needle"), BAD_NAMES)
def test_bad_lease_name(store: onceonly.Store, name: Any, needle: str) -> None:
    refuses(lambda: store.acquire(name, ttl=5), "name", needle)
    refuses(lambda: store.inspect(name), "name", needle)


@pytest.mark.parametrize(("name", "needle"), BAD_NAMES)
def test_bad_queue_name(store: onceonly.Store, name: Any, needle: str) -> None:
    refuses(lambda: store.queue(name), "queue name", needle)


@pytest.mark.parametrize(("item_id", "needle"), BAD_NAMES)
def test_bad_item_id(store: onceonly.Store, unique: str, item_id: Any, needle: str) -> None:
    q = store.queue(unique)
    refuses(lambda: q.put(item_id, payload={"n": 1}), "item_id", needle)
    refuses(lambda: q.cancel(item_id), "item_id", needle)
    assert q.depth().total == 0


def test_cancel_none_is_a_config_error(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    q.put("kept")
    refuses(lambda: q.cancel(None), "item_id")  # type: ignore[arg-type]
    assert q.depth().total == 1  # nothing was cancelled


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_names_at_the_limit_work_everywhere(store: onceonly.Store, width: int) -> None:
    """The longest lease name, queue name and item id, in characters of each
    UTF-8 width, in one item: the tightest DynamoDB key (the queue name is
    url-quoted into it) still fits. Every test run has a store of its own, so
    these fixed names are fresh."""
    name = longest(width)
    assert len(name.encode()) > MAX_NAME_BYTES - width
    lease = store.acquire(name, ttl=30)
    assert lease is not None and lease.name == name
    assert store.renew(lease, ttl=30).token == lease.token
    assert store.complete(lease, keep=60) is True
    state = store.inspect(name)
    assert state is not None and state.completed

    q = store.queue(name)
    q.put(name, payload={"id": name})
    (claim,) = _claim_when_visible(q)
    assert (claim.item_id, claim.payload) == (name, {"id": name})
    assert q.retry(claim, due_at=time.time()) is True
    (again,) = _claim_when_visible(q)
    assert q.ack(again) is True
    assert q.cancel(name) is False


# -- payloads -----------------------------------------------------------------------------
@pytest.mark.parametrize(("payload", "needle"), BAD_PAYLOADS)
def test_bad_payload(store: onceonly.Store, unique: str, payload: Any, needle: str) -> None:
    q = store.queue(unique)
    refuses(lambda: q.put("item", payload=payload), "payload", needle)
    assert q.depth().total == 0


def test_bad_payload_leaves_an_existing_item_untouched(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    q.put("item", payload={"v": 1})
    refuses(lambda: q.put("item", due_at=MAX_EPOCH, payload=NAN), "payload")
    (claim,) = _claim_when_visible(q)
    assert claim.payload == {"v": 1}


def test_largest_payload_works_everywhere(store: onceonly.Store, unique: str) -> None:
    """MAX_PAYLOAD_BYTES of JSON with long names still fits one DynamoDB item.
    ASCII: dynalite sizes strings in characters, DynamoDB in UTF-8 bytes."""
    text = "x" * (MAX_PAYLOAD_BYTES - 2)
    assert len(f'"{text}"'.encode()) == MAX_PAYLOAD_BYTES
    q = store.queue(unique + "é" * ((MAX_NAME_BYTES - len(unique)) // 2))
    q.put(longest(4), payload=text)
    (claim,) = _claim_when_visible(q)
    assert claim.payload == text
    assert q.ack(claim) is True


def test_payload_round_trips_unicode(store: onceonly.Store, unique: str) -> None:
    payload = {"name": "Zoë €5 𝄞", "ctrl": "tab\tnewline\n", "backslash-u0000": "\\u0000", "big": 2**70}
    q = store.queue(unique)
    q.put("item", payload=payload)
    (claim,) = _claim_when_visible(q)
    assert claim.payload == payload


# Numbers a re-encoding store changes (jsonb: 1e16 -> an int, -0.0 -> 0.0, a
# float near 2**60 -> another number), and their neighbours.
EXACT_NUMBERS = {"1e16": 1e16, "-0.0": -0.0, "float 2**60": float(2**60), "int 2**60": 2**60,
                 "2**60+1 as float": float(2**60 + 1), "0.1": 0.1, "tiny": 5e-324, "huge": 1.7976931348623157e308,
                 "1.0": 1.0, "nested": [-0.0, 1e16, {"x": 1.5e300}], "int 2**70": 2**70}


def _exact(value: Any) -> str:
    """Every bit that matters, where == is blind: -0.0 == 0.0 and 1e16 == 10**16."""
    return json.dumps(value, sort_keys=True)


@pytest.mark.parametrize("batch", [False, True], ids=["put", "put_many"])
def test_payload_numbers_come_back_exactly_as_put(store: onceonly.Store, unique: str, batch: bool) -> None:
    q = store.queue(unique)
    if batch:
        q.put_many([("item", None, EXACT_NUMBERS)])
    else:
        q.put("item", payload=EXACT_NUMBERS)
    (claim,) = _claim_when_visible(q)
    assert _exact(claim.payload) == _exact(EXACT_NUMBERS)
    assert {k: type(v) for k, v in claim.payload.items()} == {k: type(v) for k, v in EXACT_NUMBERS.items()}


# -- times and limits ---------------------------------------------------------------------
@pytest.mark.parametrize("due_at", BAD_DUE_AT, ids=_id)
def test_bad_due_at(store: onceonly.Store, unique: str, due_at: Any) -> None:
    q = store.queue(unique)
    refuses(lambda: q.put("item", due_at=due_at), "due_at")
    assert q.depth().total == 0


@pytest.mark.parametrize("due_at", [*BAD_DUE_AT, None], ids=_id)
def test_bad_retry_due_at_keeps_the_claim(store: onceonly.Store, unique: str, due_at: Any) -> None:
    q = store.queue(unique)
    q.put("item")
    (claim,) = _claim_when_visible(q)
    refuses(lambda: q.retry(claim, due_at=due_at), "due_at")
    assert q.ack(claim) is True  # the claim still holds the item: nothing was lost


def test_due_at_bounds_are_accepted(store: onceonly.Store, unique: str) -> None:
    q = store.queue(unique)
    q.put("epoch", due_at=0)
    q.put("year-9999", due_at=MAX_EPOCH)
    (claim,) = _claim_when_visible(q)
    assert claim.item_id == "epoch"
    assert q.cancel("year-9999") is True


@pytest.mark.parametrize("seconds", BAD_SECONDS, ids=_id)
def test_bad_durations(store: onceonly.Store, unique: str, seconds: Any) -> None:
    refuses(lambda: store.acquire(unique, ttl=seconds), "ttl")
    assert store.inspect(unique) is None
    lease = store.acquire(unique, ttl=30)
    assert lease is not None
    refuses(lambda: store.renew(lease, ttl=seconds), "ttl")
    refuses(lambda: store.complete(lease, keep=seconds), "keep")
    refuses(lambda: store.queue(unique).claim(limit=1, lease=seconds), "lease")
    assert store.release(lease) is True  # still held by us: the bad calls changed nothing


@pytest.mark.parametrize("limit", BAD_LIMITS, ids=_id)
def test_bad_claim_limit(store: onceonly.Store, unique: str, limit: Any) -> None:
    q = store.queue(unique)
    q.put("item")
    refuses(lambda: q.claim(limit=limit, lease=30), "limit")
    assert len(_claim_when_visible(q)) == 1  # nothing was claimed by the refused call


# -- Lease and Claim arguments ------------------------------------------------------------
def _bad_leases(lease: onceonly.Lease, claim: onceonly.Claim) -> list[tuple[Any, str]]:
    return [
        (None, "onceonly.Lease"),
        (lease.name, "onceonly.Lease"),
        (claim, "onceonly.Lease"),
        ({"name": lease.name, "owner": lease.owner, "token": lease.token}, "onceonly.Lease"),
        (replace(lease, token=str(lease.token)), "lease.token"),
        (replace(lease, token=float(lease.token)), "lease.token"),
        (replace(lease, token=-1), "lease.token"),
        (replace(lease, token=2**63), "lease.token"),
        (replace(lease, owner=None), "lease.owner"),
        (replace(lease, owner="o\x00"), "lease.owner"),
        (replace(lease, name=None), "lease.name"),
        (replace(lease, name="n\ud800"), "lease.name"),
    ]


def test_bad_lease_arguments(store: onceonly.Store, unique: str) -> None:
    lease = store.acquire(unique, ttl=30)
    assert lease is not None
    q = store.queue(unique)
    q.put("item")
    (claim,) = _claim_when_visible(q)
    for bad, needle in _bad_leases(lease, claim):
        refuses(lambda bad=bad: store.renew(bad, ttl=30), "lease", needle)
        refuses(lambda bad=bad: store.release(bad), "lease", needle)
        refuses(lambda bad=bad: store.complete(bad, keep=30), "lease", needle)
    assert store.complete(lease, keep=30) is True  # the real lease was untouched
    assert q.ack(claim) is True


def test_bad_claim_arguments(store: onceonly.Store, unique: str) -> None:
    q, other = store.queue(unique), store.queue(unique + "-other")
    lease = store.acquire(unique, ttl=30)
    q.put("item")
    other.put("item")
    (claim,) = _claim_when_visible(q)
    (foreign,) = _claim_when_visible(other)
    bad_claims: list[tuple[Any, str]] = [
        (None, "onceonly.Claim"),
        ("item", "onceonly.Claim"),
        (lease, "onceonly.Claim"),
        (foreign, "queue"),
        (replace(claim, token=str(claim.token)), "claim.token"),
        (replace(claim, token=-5), "claim.token"),
        (replace(claim, owner=None), "claim.owner"),
        (replace(claim, item_id=None), "claim.item_id"),
        (replace(claim, item_id="i\x00"), "claim.item_id"),
    ]
    for bad, needle in bad_claims:
        refuses(lambda bad=bad: q.ack(bad), "claim", needle)
        refuses(lambda bad=bad: q.ack_many([claim, bad]), "claim", needle)
        refuses(lambda bad=bad: q.retry(bad, due_at=time.time()), "claim", needle)
    for not_a_list in (None, claim, "item", 5):
        refuses(lambda v=not_a_list: q.ack_many(v), "claims", "list")
    assert q.ack_many([claim]) == [True]  # the refused calls acked nothing
    assert other.ack(foreign) is True


def test_whitespace_around_the_url_is_ignored(store: onceonly.Store, store_url: str, unique: str) -> None:
    """A URL read from Secrets Manager or an env file often ends in a newline.
    (``store`` sets the store up, so this test does not lean on an earlier one.)"""
    for url in (store_url + "\n", f"  {store_url}\r\n", f"\t{store_url} "):
        padded = onceonly.connect(url)
        try:
            lease = padded.acquire(f"{unique}-{len(url)}", ttl=5)
            assert lease is not None
        finally:
            padded.close()


def _claim_when_visible(q: onceonly.Queue, limit: int = 5) -> list[onceonly.Claim]:
    """claim() until something comes back: DynamoDB's GSI is eventually consistent."""
    deadline = time.monotonic() + 10
    while True:
        claims = q.claim(limit=limit, lease=30)
        if claims or time.monotonic() > deadline:
            return claims
        time.sleep(0.05)
