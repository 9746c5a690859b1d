"""Argument checks and helpers every backend shares, so that bad input fails the
same way, with the same message, on every store: a ConfigError naming the
argument, raised before any round trip (never StoreUnavailableError, which
tells the caller to retry). The limits are documented in docs/coordination.md."""

from __future__ import annotations

import json
import math
import re
import secrets
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..api import Claim, Lease, Permit
from ..errors import ConfigError

# Bytes of UTF-8 in a lease name, queue name or item id. Sized for the tightest
# key: a DynamoDB queue item's pk "q#" + url-quoted queue (up to 3 bytes per
# byte) + "#" + item id = 2 + 1500 + 1 + 500 <= 2048, DynamoDB's limit for a
# partition key. PostgreSQL's btree rows (about 2700 bytes) and Redis keys fit too.
MAX_NAME_BYTES = 500
# Bytes of UTF-8 JSON: SQS's and EventBridge's message limit, far below
# DynamoDB's 400 KB item (which also holds the keys and bookkeeping attributes).
MAX_PAYLOAD_BYTES = 256 * 1024
MAX_CLAIM_LIMIT = 1000
# Places of one counting semaphore. Its holders live in one record (a Redis
# sorted set, a PostgreSQL row, a DynamoDB item): 10,000 holders of about 30
# bytes each stay well inside DynamoDB's 400 KB item.
MAX_PERMIT_LIMIT = 10_000
# Ten years: past this a ttl is a bug, and some stores would overflow their
# integer milliseconds instead of failing.
MAX_SECONDS = 10 * 365 * 86400
# Epoch seconds of 9999-12-31T23:59:59Z: every store's clock type (and
# Python's datetime) holds it; 1e308 would overflow Redis's milliseconds.
MAX_EPOCH = 253402300799
# A fencing token is a PostgreSQL bigint.
MAX_TOKEN = 2**63 - 1
# json.dumps writes a NUL as \u0000 (after an even number of backslashes);
# PostgreSQL's jsonb cannot store it.
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def new_owner() -> str:
    """A random owner id per grant: never a hostname, so two containers on one
    host (or one container reused) cannot pass for each other."""
    return secrets.token_hex(8)


def check_name(name: str, what: str = "name", *, max_bytes: int = MAX_NAME_BYTES) -> str:
    """A lease name, queue name, item id or key prefix: a non-empty str without
    NUL that encodes to at most ``max_bytes`` of UTF-8 (so no lone surrogates);
    a smaller ``max_bytes`` for a part of a name that others are built from."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{what} must be a non-empty string, got {_short(name)}")
    if "\x00" in name:
        raise ConfigError(f"{what} must not contain NUL characters, got {_short(name)}")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ConfigError(f"{what} is not valid Unicode (a lone surrogate at index {exc.start})") from None
    if size > max_bytes:
        raise ConfigError(f"{what} is {size} bytes in UTF-8; at most {max_bytes} are allowed")
    return name


def check_seconds(value: float, what: str) -> float:
    """``value`` as float seconds: a number > 0 and at most MAX_SECONDS (ten
    years); otherwise ConfigError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{what} must be a number of seconds, got {_short(value)}")
    if not _finite(value) or value <= 0:
        raise ConfigError(f"{what} must be a positive number of seconds, got {_short(value)}")
    if value > MAX_SECONDS:
        raise ConfigError(f"{what} must be at most {MAX_SECONDS} seconds (ten years), got {_short(value)}")
    return float(value)


def check_flag(value: bool, what: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{what} must be True or False, got {value!r}")
    return value


def check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_CLAIM_LIMIT:
        raise ConfigError(f"limit must be an integer from 1 to {MAX_CLAIM_LIMIT}, got {_short(limit)}")
    return limit


def check_permit_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PERMIT_LIMIT:
        raise ConfigError(f"limit must be an integer from 1 to {MAX_PERMIT_LIMIT}, got {_short(limit)}")
    return limit


def check_wants(wants: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """take_permits' (name, limit) pairs, each checked."""
    if isinstance(wants, (str, bytes)) or not isinstance(wants, Sequence):
        raise ConfigError(f"wants must be a sequence of (name, limit) pairs, got {type(wants).__name__}")
    checked = []
    for want in wants:
        if not isinstance(want, tuple) or len(want) != 2:
            raise ConfigError(f"each want must be a (name, limit) pair, got {_short(want)}")
        checked.append((check_name(want[0]), check_permit_limit(want[1])))
    return checked


def distinct_rounds(keys: Sequence[Hashable]) -> list[list[int]]:
    """The indexes of ``keys`` in rounds whose keys are distinct, each round in
    order: a key's first occurrence in the first round, its second in the
    second, and so on (one statement cannot change one row twice)."""
    rounds: list[list[int]] = []
    seen: dict[Hashable, int] = {}
    for i, key in enumerate(keys):
        n = seen[key] = seen.get(key, -1) + 1
        if n == len(rounds):
            rounds.append([])
        rounds[n].append(i)
    return rounds


def check_permit(permit: Permit) -> Permit:
    """A Permit as take_permit returned it."""
    if not isinstance(permit, Permit):
        raise ConfigError(f"permit must be a onceonly.Permit (from take_permit), got {type(permit).__name__}")
    check_name(permit.name, "permit.name")
    check_name(permit.holder, "permit.holder")
    return permit


def check_permits(permits: Sequence[Permit]) -> list[Permit]:
    """return_permits' permits, each checked."""
    if isinstance(permits, (str, bytes, Permit)) or not isinstance(permits, Sequence):
        raise ConfigError(f"permits must be a sequence of onceonly.Permit, got {type(permits).__name__}")
    return [check_permit(permit) for permit in permits]


def check_due_at(due_at: float | None) -> float | None:
    """Epoch seconds from 0 to the end of year 9999, or None (now)."""
    if due_at is None:
        return None
    if isinstance(due_at, bool) or not isinstance(due_at, (int, float)):
        raise ConfigError(f"due_at must be epoch seconds or None, got {_short(due_at)}")
    if not (_finite(due_at) and 0 <= due_at <= MAX_EPOCH):
        raise ConfigError(f"due_at must be epoch seconds from 0 to {MAX_EPOCH} (year 9999), got {_short(due_at)}")
    return float(due_at)


def check_retry_due_at(due_at: float) -> float:
    due = check_due_at(due_at)
    if due is None:
        raise ConfigError("retry needs a due_at (epoch seconds), got None")
    return due


@dataclass(frozen=True)
class CheckedPut:
    """One put, checked: the id, the due time (None = now) and the payload as JSON text."""

    item_id: str
    due_at: float | None
    payload: str


def check_put(item_id: str, due_at: float | None, payload: Any) -> CheckedPut:
    return CheckedPut(check_name(item_id, "item_id"), check_due_at(due_at), encode_payload(payload))


def check_put_items(items: Iterable[tuple[str, float | None, Any]]) -> list[CheckedPut]:
    """put_many's items, every one checked before anything is written; a bad one
    raises ConfigError naming its index."""
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
        raise ConfigError(f"items must be an iterable of (item_id, due_at, payload) tuples, got {_short(items)}")
    checked = []
    for index, item in enumerate(items):
        if not isinstance(item, tuple) or len(item) != 3:
            raise ConfigError(f"items[{index}] must be an (item_id, due_at, payload) tuple, got {_short(item)}")
        try:
            checked.append(check_put(*item))
        except ConfigError as exc:
            raise ConfigError(f"items[{index}]: {exc}") from exc
    return checked


def last_put_per_item(puts: Sequence[CheckedPut]) -> list[CheckedPut]:
    """One put per item id, the later one winning, as put called in order would
    leave it: for stores that write a batch in one step."""
    return list({put.item_id: put for put in puts}.values())


def first_put_per_item(puts: Sequence[CheckedPut]) -> tuple[list[CheckedPut], list[int]]:
    """For put_if_absent: one put per item id, the first one (a later entry of
    the same id would find the first one's item), and the index in ``puts``
    of each put kept."""
    kept: dict[str, int] = {}
    for index, put in enumerate(puts):
        kept.setdefault(put.item_id, index)
    return [puts[i] for i in kept.values()], list(kept.values())


def absent_results(count: int, puts: Sequence[CheckedPut], kept: Sequence[int], done: set[str]) -> list[bool]:
    """put_if_absent's answer for each of the ``count`` entries given: True for
    the first entry of each id that was put (``done``), False for the rest."""
    results = [False] * count
    for put, index in zip(puts, kept, strict=True):
        results[index] = put.item_id in done
    return results


def first_listed(ids: Sequence[str], removed: set[str]) -> list[bool]:
    """Per id, in order: whether it is in ``removed``; an id listed again is
    False after its first entry (it was removed once)."""
    seen: set[str] = set()
    out = []
    for item_id in ids:
        out.append(item_id in removed and item_id not in seen)
        seen.add(item_id)
    return out


def batches(sizes: Sequence[int], max_items: int, max_bytes: int) -> list[range]:
    """Consecutive runs of items (given their sizes) of at most ``max_items``
    items and ``max_bytes`` bytes, so that one request stays bounded (an item
    larger than ``max_bytes`` goes alone)."""
    runs, start, total = [], 0, 0
    for i, size in enumerate(sizes):
        if i > start and (i - start == max_items or total + size > max_bytes):
            runs.append(range(start, i))
            start, total = i, 0
        total += size
    if start < len(sizes):
        runs.append(range(start, len(sizes)))
    return runs


def check_lease(lease: Lease) -> Lease:
    """A Lease as acquire/renew returned it; a wrong type or a hand-built one with
    bad fields would otherwise fail inside a driver, or as 'unavailable'."""
    if not isinstance(lease, Lease):
        raise ConfigError(f"lease must be a onceonly.Lease (from acquire), got {type(lease).__name__}")
    check_name(lease.name, "lease.name")
    check_name(lease.owner, "lease.owner")
    _check_token(lease.token, "lease.token")
    return lease


def check_claim(claim: Claim, queue: str) -> Claim:
    """A Claim this queue's claim() returned."""
    if not isinstance(claim, Claim):
        raise ConfigError(f"claim must be a onceonly.Claim (from claim), got {type(claim).__name__}")
    if claim.queue != queue:
        raise ConfigError(f"claim is of queue {_short(claim.queue)}, not of queue {queue!r}")
    check_name(claim.item_id, "claim.item_id")
    check_name(claim.owner, "claim.owner")
    _check_token(claim.token, "claim.token")
    return claim


def check_claims(claims: Sequence[Claim], queue: str) -> list[Claim]:
    if isinstance(claims, (str, bytes, Claim)) or not isinstance(claims, Sequence):
        raise ConfigError(f"claims must be a list of onceonly.Claim, got {type(claims).__name__}")
    return [check_claim(claim, queue) for claim in claims]


def _check_token(token: int, what: str) -> None:
    if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token <= MAX_TOKEN:
        raise ConfigError(f"{what} must be an integer from 0 to 2**63-1, got {_short(token)}")


def encode_payload(payload: Any, limit: int = MAX_PAYLOAD_BYTES) -> str:
    """The payload as JSON text every store keeps as is: strict JSON (no NaN or
    Infinity), valid UTF-8, no NUL (jsonb refuses it), at most ``limit`` bytes."""
    try:
        text = json.dumps(payload, separators=(",", ":"), sort_keys=True, ensure_ascii=False,
                          allow_nan=False)
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ConfigError(f"payload is not valid Unicode (a lone surrogate): {exc.reason}") from None
    except (TypeError, ValueError, RecursionError) as exc:
        raise ConfigError(f"payload must be JSON-serialisable without NaN or Infinity: {exc}") from exc
    if _JSON_NUL.search(text):
        raise ConfigError("payload must not contain NUL characters (PostgreSQL's jsonb cannot store them)")
    if size > limit:
        raise ConfigError(f"payload is {size} bytes of JSON; at most {limit} are allowed")
    return text


def decode_payload(text: str | bytes | None) -> Any:
    return None if text is None else json.loads(text)


def grant_key(claim: Claim) -> tuple[str, int, str]:
    """What identifies one grant of an item: a stale and a fresh claim differ."""
    return (claim.item_id, claim.token, claim.owner)


def _finite(value: float) -> bool:
    """math.isfinite, for ints too large to become a float (10**400)."""
    return isinstance(value, int) or math.isfinite(value)


def _short(value: object, limit: int = 60) -> str:
    """A repr for messages: a megabyte-long bad name must not become the message."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({type(value).__name__})"
