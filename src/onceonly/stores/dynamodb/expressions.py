"""The table's layout as DynamoDB sees it: the condition and update expressions,
one named constant each with the race it closes, and the keys and attribute
values they are given."""

from __future__ import annotations

import re
import zlib
from urllib.parse import quote

INDEX_NAME = "due"
TTL_ATTRIBUTE = "expire_at"  # template.yaml's TimeToLiveSpecification names the same
LEASE_PREFIX = "lease#"
QUEUE_PREFIX = "q#"
SEMAPHORE_PREFIX = "sem#"
# A semaphore item holds each holder as an attribute of its own, named by this
# prefix + the holder id, valued by its expiry (epoch seconds).
HOLDER_PREFIX = "h_"

# -- lease expressions -------------------------------------------------------
# acquire: grant the name if it was never granted or its time ran out (expired,
# released, or completed and kept long enough). Closes the check-then-set race:
# the check and the takeover are one conditional write. The token survives in
# the record (if_not_exists starts it at 0), so it strictly increases.
LEASE_IS_FREE = "attribute_not_exists(#pk) OR #busy_until <= :now"
# A grant also removes expire_at: TTL deletion runs up to days late, and must
# never take the record of a name that was granted again after its keep.
GRANT_LEASE = (
    "SET #owner = :owner, #token = if_not_exists(#token, :zero) + :one,"
    " #busy_until = :until, #completed = :false REMOVE #expire_at"
)
# renew/release/complete: only the current grant may write. A stale holder
# (expired and re-granted: another token) or a released one (owner cleared) or
# a completed one is refused, so it cannot extend or end someone else's lease.
LEASE_IS_HELD_BY_CALLER = "#owner = :owner AND #token = :token AND #completed = :false"
EXTEND_LEASE = "SET #busy_until = :until"
RELEASE_LEASE = "SET #busy_until = :now REMOVE #owner"
COMPLETE_LEASE = "SET #busy_until = :until, #completed = :true"
# complete(expire=True): the same, plus the TTL attribute at the end of keep
# (rounded up: DynamoDB TTL takes whole epoch seconds).
COMPLETE_EXPIRING_LEASE = "SET #busy_until = :until, #completed = :true, #expire_at = :expire_at"

# -- counting semaphore expressions ---------------------------------------------
# One item ``sem#NAME`` per semaphore: n = how many holder attributes it has
# (live or ended), changed in the same write as every add and removal.
# take_permit: add a holder if fewer than limit holder attributes are there.
# Closes the count-then-add race: the count is checked and raised in one
# conditional write. It counts ended holders too; only when that leaves no
# room does take_permit look at the item (the one the failed write returns, or
# a read) and evict the ended ones (below).
# The holder must be new: botocore's retry of an add that was applied but not
# answered would otherwise count the one holder twice, and n would never come
# back down (a place lost for good); refused, it says "unknown" instead
# (table.send_conditional) and the holder's place frees when its ttl ends.
SEMAPHORE_HAS_ROOM = "(attribute_not_exists(#pk) OR #n < :limit) AND attribute_not_exists(#holder)"
ADD_HOLDER = "SET #holder = :until, #n = if_not_exists(#n, :zero) + :one"
# The eviction: the ended holders read are removed (and this one added, when
# that makes room) only if every one of them is still there: a concurrent
# evictor or return already took it out of n otherwise. Their expiries never
# change, so "still there" is "still ended". Built per call from these parts
# (evicted_condition / evict_update), for at most MAX_EVICT holders.
HOLDER_IS_THERE = "attribute_exists({alias})"
ROOM_AFTER_EVICTION = "#n < :room AND attribute_not_exists(#holder)"
# return_permit: only this holder's own attribute is removed, so a repeated or
# stale return frees no other place.
REMOVE_HOLDER = "REMOVE #holder SET #n = #n - :one"
HOLDER_EXISTS = "attribute_exists(#holder)"
# Holder attributes removed per eviction write: keeps its expressions far
# below DynamoDB's 4 KB expression limit.
MAX_EVICT = 50

# -- queue expressions -------------------------------------------------------
# put: unconditional upsert. Removing the owner takes an in-flight item from its
# holder, whose ack/retry are then refused; token and attempt survive.
PUT_ITEM = (
    "SET #payload = :payload, #claimable_at = :due, #qshard = :qshard, #queue = :queue,"
    " #item_id = :item_id, #token = if_not_exists(#token, :zero),"
    " #attempt = if_not_exists(#attempt, :zero) REMOVE #owner"
)
# put_if_absent: an item that exists, in any state, is left as it is.
ITEM_IS_ABSENT = "attribute_not_exists(#pk)"
DUE_IN_SHARD = "#qshard = :qshard AND #claimable_at <= :now"
NOT_DUE_IN_SHARD = "#qshard = :qshard AND #claimable_at > :now"
HAS_OWNER = "attribute_exists(#owner)"
# claim: the GSI listing may be stale and other claimers read the same listing.
# This condition makes concurrent claimers disjoint: the first write moves
# claimable_at to now + lease, so every later write on that item fails it.
# attribute_exists stops a claim from recreating an item acked or cancelled
# since the listing.
ITEM_IS_CLAIMABLE = "attribute_exists(#pk) AND #claimable_at <= :now"
GRANT_ITEM = (
    "SET #token = #token + :one, #attempt = #attempt + :one,"
    " #owner = :owner, #claimable_at = :until"
)
# ack/retry: only the current grant may finish the item. A re-granted item has
# a higher token; a rescheduled (put) or retried one has no owner.
ITEM_IS_HELD_BY_CALLER = "#token = :token AND #owner = :owner"
RESCHEDULE_ITEM = "SET #claimable_at = :due REMOVE #owner"

_ALIAS = re.compile(r"#(\w+)")


def names(*expressions: str) -> dict[str, str]:
    """ExpressionAttributeNames for exactly the #aliases the expressions use:
    every attribute is aliased (owner, token, queue... may be reserved words), and
    DynamoDB rejects aliases an expression does not use."""
    return {f"#{name}": name for name in _ALIAS.findall(" ".join(expressions))}


def epoch(seconds: float) -> dict[str, str]:
    return {"N": f"{seconds:.3f}"}  # ms precision, the value read back is the value written


def number(value: int) -> dict[str, str]:
    return {"N": str(value)}


def string(value: str) -> dict[str, str]:
    return {"S": value}


ZERO, ONE = number(0), number(1)
FALSE, TRUE = {"BOOL": False}, {"BOOL": True}


def lease_key(name: str) -> dict[str, dict[str, str]]:
    return {"pk": string(LEASE_PREFIX + name)}


def semaphore_key(name: str) -> dict[str, dict[str, str]]:
    return {"pk": string(SEMAPHORE_PREFIX + name)}


def holder_attribute(holder: str) -> str:
    return HOLDER_PREFIX + holder


def evicted_condition(aliases: list[str], *, room: bool) -> str:
    """Every evicted holder is still there (and, ``room``, the count leaves room)."""
    parts = [HOLDER_IS_THERE.format(alias=alias) for alias in aliases]
    return " AND ".join([*parts, ROOM_AFTER_EVICTION] if room else parts)


def evict_update(aliases: list[str], *, add: bool) -> str:
    """Remove the evicted holders and move n by :delta (and add #holder)."""
    sets = "SET #n = #n + :delta" + (", #holder = :until" if add else "")
    return f"REMOVE {', '.join(aliases)} {sets}"


def item_key(queue: str, item_id: str) -> dict[str, dict[str, str]]:
    # The queue part is escaped so that queue "a#b" + item "c" and queue "a" +
    # item "b#c" cannot share a key: the first unescaped "#" ends the queue.
    return {"pk": string(f"{QUEUE_PREFIX}{quote(queue, safe='')}#{item_id}")}


def qshard(queue: str, item_id: str, shards: int) -> str:
    # crc32, not hash(): stable across processes and Python versions.
    return f"{queue}#{zlib.crc32(item_id.encode('utf-8')) % shards}"
