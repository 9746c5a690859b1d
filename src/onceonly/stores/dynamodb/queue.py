"""A due queue: one item ``q#QUEUE#ITEM_ID`` each, with ONE "claimable at" time,
the sort key of the ``due`` GSI (see the package docstring)."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from ...api import Claim, ClaimBatch, QueueDepth
from ...errors import OnceOnlyError, StoreUnavailableError
from .. import _common as common
from .batches import write_all
from .deadline import Deadline
from .expressions import (
    DUE_IN_SHARD,
    GRANT_ITEM,
    HAS_OWNER,
    INDEX_NAME,
    ITEM_IS_ABSENT,
    ITEM_IS_CLAIMABLE,
    ITEM_IS_HELD_BY_CALLER,
    NOT_DUE_IN_SHARD,
    ONE,
    PUT_ITEM,
    RESCHEDULE_ITEM,
    ZERO,
    epoch,
    item_key,
    names,
    number,
    qshard,
    string,
)
from .table import Table

log = logging.getLogger(__name__)

# What a call that did not finish may have left, per kind of call (the end of
# its StoreUnavailableError message).
PUT_MANY_UNFINISHED = "an unanswered put may have been written; put_many again writes them all"
PUT_IF_ABSENT_UNFINISHED = "an unanswered put may have been written; put_if_absent again puts the missing ones"
ACKS_UNFINISHED = ("an unanswered ack may have been applied (its item is then gone); an item not acked"
                   " returns to the queue when its lease ends")
CLAIM_UNFINISHED = ("an item granted by an unanswered write is held by nobody and returns to the queue"
                    " when its lease ends")
DEPTH_UNFINISHED = "depth only reads"


@dataclass(frozen=True)
class _ClaimRound:
    """What every conditional claim write of one claim() call shares."""

    owner: str
    now: float
    until: float


def _page_size(needed: int) -> int:
    # A little above what is still needed: some listed items will be lost to
    # other claimers or be stale in the eventually consistent GSI.
    return needed + max(2, needed // 4)


class DynamoDBQueue:
    """A due queue on the store's table; see the package docstring for the layout.
    Built by DynamoDBStore.queue with what it needs of the store: the table,
    the store's clock (epoch seconds) and its number of shards."""

    def __init__(self, table: Table, clock: Callable[[], float], shards: int, name: str) -> None:
        self._table = table
        self._clock = clock
        self._shards = shards
        self.name = name

    def _key(self, item_id: str) -> dict[str, dict[str, str]]:
        return item_key(self.name, item_id)

    def _shard_keys(self) -> list[str]:
        return [f"{self.name}#{k}" for k in range(self._shards)]

    def put(self, item_id: str, due_at: float | None = None, payload: Any = None) -> None:
        put = common.check_put(item_id, due_at, payload)
        self._table.call(self._table.start("put"), "update_item", **self._put_write(put))

    def put_many(self, items: Iterable[tuple[str, float | None, Any]]) -> int:
        """The puts in TransactWriteItems of up to 100 (see batches.write_all),
        each batch within a ``timeout`` of its own: however many items, the
        call fails only when one batch does not finish in time, and then no
        later batch is sent. Not BatchWriteItem: its PutItem replaces the whole
        record, which would reset the token and attempt count of an item that
        is rescheduled."""
        puts = common.check_put_items(items)
        # One write per id (the later entry wins): a transaction takes an item
        # once, and concurrent writes of one item would land in any order.
        writes = [("update_item", self._put_write(put)) for put in common.last_put_per_item(puts)]
        write_all(self._table, self._table.start("put_many"), writes, PUT_MANY_UNFINISHED, deadline_per_batch=True)
        return len(puts)

    def put_if_absent(self, items: Iterable[tuple[str, float | None, Any]]) -> list[bool]:
        """The puts, each conditional on its item not existing (ITEM_IS_ABSENT),
        in TransactWriteItems of up to 100 where the server has them."""
        checked = common.check_put_items(items)
        puts, kept = common.first_put_per_item(checked)
        writes = []
        for put in puts:
            write = self._put_write(put)
            write["ConditionExpression"] = ITEM_IS_ABSENT
            write["ExpressionAttributeNames"] = names(ITEM_IS_ABSENT, PUT_ITEM)
            writes.append(("update_item", write))
        # A deadline per batch, as put_many: subscriptions.enable() puts all of
        # a subscription's held deliveries in one call.
        applied = write_all(self._table, self._table.start("put_if_absent"), writes, PUT_IF_ABSENT_UNFINISHED,
                            deadline_per_batch=True)
        done = {put.item_id for put, put_now in zip(puts, applied, strict=True) if put_now}
        return common.absent_results(len(checked), puts, kept, done)

    def _put_write(self, put: common.CheckedPut) -> dict[str, Any]:
        return {
            "Key": self._key(put.item_id),
            "UpdateExpression": PUT_ITEM,
            "ExpressionAttributeNames": names(PUT_ITEM),
            "ExpressionAttributeValues": {
                ":payload": string(put.payload),
                ":due": epoch(self._clock() if put.due_at is None else put.due_at),
                ":qshard": string(qshard(self.name, put.item_id, self._shards)),
                ":queue": string(self.name), ":item_id": string(put.item_id), ":zero": ZERO,
            },
        }

    def cancel_many(self, item_ids: Sequence[str]) -> list[bool]:
        """One DeleteItem each: BatchWriteItem would not say which items were there."""
        ids = [common.check_name(item_id, "item_id") for item_id in item_ids]
        return [self.cancel(item_id) for item_id in ids]

    def cancel(self, item_id: str) -> bool:
        key = self._key(common.check_name(item_id, "item_id"))
        response = self._table.call(self._table.start("cancel"), "delete_item", Key=key, ReturnValues="ALL_OLD")
        return bool(response.get("Attributes"))

    # -- claim ------------------------------------------------------------
    def claim(self, limit: int = 25, lease: float = 60.0, *, acks: Sequence[Claim] = ()) -> ClaimBatch:
        """See :class:`onceonly.Queue`. ``acks`` are acked first (as ack_many),
        then the claim runs, all within one deadline. Every argument is checked
        before the first request."""
        acks = common.check_claims(acks, self.name)
        limit, lease = common.check_limit(limit), common.check_seconds(lease, "lease")
        deadline = self._table.start("claim")
        acked = self._ack_all(deadline, acks) if acks else []
        return ClaimBatch(self._claim(deadline, limit, lease), acked)

    def _claim(self, deadline: Deadline, limit: int, lease: float) -> list[Claim]:
        """Walks the shards from a random one, so concurrent claimers start
        apart. If DynamoDB fails, or the deadline passes, after some items were
        granted, those are returned (the failure is logged) rather than lost."""
        now = self._clock()
        claim_round = _ClaimRound(owner=common.new_owner(), now=now, until=now + lease)
        shard_keys = self._shard_keys()
        start = random.randrange(len(shard_keys))
        claims: list[Claim] = []
        try:
            for shard in shard_keys[start:] + shard_keys[:start]:
                self._claim_in_shard(deadline, shard, claim_round, limit, claims)
                if len(claims) >= limit:
                    break
        except StoreUnavailableError:
            if not claims:
                raise
            log.warning("onceonly dynamodb claim: returning %d granted items after a store error",
                        len(claims), extra={"queue": self.name, "owner": claim_round.owner}, exc_info=True)
        return claims

    def _claim_in_shard(
        self, deadline: Deadline, shard: str, claim_round: _ClaimRound, limit: int, claims: list[Claim]
    ) -> None:
        """Page through the shard's due items, oldest first, claiming in waves of
        at most what is still needed, so that wins never exceed ``limit``.
        Appends to ``claims`` as writes succeed, so a later failure keeps them."""
        start_key: dict[str, Any] | None = None
        while len(claims) < limit:
            page = self._due_page(deadline, shard, claim_round.now, _page_size(limit - len(claims)), start_key)
            candidates = [item["pk"]["S"] for item in page.get("Items", [])]
            while candidates and len(claims) < limit:
                needed = limit - len(claims)
                wave, candidates = candidates[:needed], candidates[needed:]
                outcomes = self._table.run(deadline, [partial(self._grant, deadline, pk, claim_round) for pk in wave])
                claims.extend(o for o in outcomes if isinstance(o, Claim))
                if any(isinstance(o, OnceOnlyError) for o in outcomes):
                    raise self._table.failure(deadline, outcomes, CLAIM_UNFINISHED, "claim writes")
            start_key = page.get("LastEvaluatedKey")
            if start_key is None:
                return

    def _due_page(
        self, deadline: Deadline, shard: str, now: float, size: int, start_key: dict[str, Any] | None
    ) -> dict[str, Any]:
        extra = {"ExclusiveStartKey": start_key} if start_key else {}
        return self._table.call(
            deadline, "query",
            IndexName=INDEX_NAME,
            KeyConditionExpression=DUE_IN_SHARD,
            ProjectionExpression="#pk",
            ExpressionAttributeNames=names(DUE_IN_SHARD, "#pk"),
            ExpressionAttributeValues={":qshard": string(shard), ":now": epoch(now)},
            Limit=size,
            **extra,
        )

    def _grant(self, deadline: Deadline, pk: str, claim_round: _ClaimRound) -> Claim | None:
        """One conditional claim write; None if another claimer got there first.
        The lease's end is fixed when the call starts, so a write the caller
        never hears of (cut off by the deadline) still ends at that time."""
        response = self._table.send_conditional(deadline, "update_item", {
            "Key": {"pk": string(pk)},
            "ConditionExpression": ITEM_IS_CLAIMABLE,
            "UpdateExpression": GRANT_ITEM,
            "ExpressionAttributeNames": names(ITEM_IS_CLAIMABLE, GRANT_ITEM),
            "ExpressionAttributeValues": {
                ":now": epoch(claim_round.now), ":until": epoch(claim_round.until),
                ":owner": string(claim_round.owner), ":one": ONE,
            },
            "ReturnValues": "ALL_NEW",
        })
        if response is None:
            return None
        item = response["Attributes"]
        return Claim(
            queue=self.name,
            item_id=item["item_id"]["S"],
            payload=common.decode_payload(item["payload"]["S"]),
            token=int(item["token"]["N"]),
            attempt=int(item["attempt"]["N"]),
            owner=item["owner"]["S"],
            lease_expires_at=float(item["claimable_at"]["N"]),
        )

    # -- finishing a claim ----------------------------------------------------
    def ack(self, claim: Claim) -> bool:
        return self._ack_all(self._table.start("ack"), [common.check_claim(claim, self.name)])[0]

    def ack_many(self, claims: Sequence[Claim]) -> list[bool]:
        """Conditional deletes, in transactions of up to 100 (see batches.write_all):
        one API call for a batch whose claims are all still held."""
        return self._ack_all(self._table.start("ack_many"), common.check_claims(claims, self.name))

    def _ack_all(self, deadline: Deadline, claims: Sequence[Claim]) -> list[bool]:
        # One delete per item: a claim listed twice is acked once, in order.
        first_index = {common.grant_key(c): i for i, c in reversed(list(enumerate(claims)))}
        distinct = [claims[i] for i in sorted(first_index.values())]
        writes = [("delete_item", self._ack_write(c)) for c in distinct]
        applied = write_all(self._table, deadline, writes, ACKS_UNFINISHED)
        acked = {common.grant_key(c): a for c, a in zip(distinct, applied, strict=True)}
        return [acked[common.grant_key(c)] and first_index[common.grant_key(c)] == i
                for i, c in enumerate(claims)]

    def _ack_write(self, claim: Claim) -> dict[str, Any]:
        return {
            "Key": self._key(claim.item_id),
            "ConditionExpression": ITEM_IS_HELD_BY_CALLER,
            "ExpressionAttributeNames": names(ITEM_IS_HELD_BY_CALLER),
            "ExpressionAttributeValues": {":token": number(claim.token), ":owner": string(claim.owner)},
        }

    def retry(self, claim: Claim, due_at: float) -> bool:
        claim, due = common.check_claim(claim, self.name), common.check_retry_due_at(due_at)
        response = self._table.conditional(
            self._table.start("retry"), "update_item",
            Key=self._key(claim.item_id),
            ConditionExpression=ITEM_IS_HELD_BY_CALLER,
            UpdateExpression=RESCHEDULE_ITEM,
            ExpressionAttributeNames=names(ITEM_IS_HELD_BY_CALLER, RESCHEDULE_ITEM),
            ExpressionAttributeValues={
                ":token": number(claim.token), ":owner": string(claim.owner), ":due": epoch(due),
            },
        )
        return response is not None

    # -- depth --------------------------------------------------------------
    def depth(self) -> QueueDepth:
        """Counts per shard, read from the eventually consistent GSI."""
        deadline, now = self._table.start("depth"), self._clock()
        outcomes = self._table.run(deadline, [partial(self._shard_depth, deadline, shard, now)
                                              for shard in self._shard_keys()])
        shards = [outcome for outcome in outcomes if isinstance(outcome, QueueDepth)]
        if len(shards) < len(outcomes):
            raise self._table.failure(deadline, outcomes, DEPTH_UNFINISHED, "shard counts")
        return QueueDepth(
            due=sum(s.due for s in shards),
            scheduled=sum(s.scheduled for s in shards),
            in_flight=sum(s.in_flight for s in shards),
        )

    def _shard_depth(self, deadline: Deadline, shard: str, now: float) -> QueueDepth:
        due = self._count(deadline, shard, now, DUE_IN_SHARD)[0]
        # Not yet due: held ones have an owner (claimable_at is their lease
        # expiry); the rest wait for their due time.
        with_owner, not_due = self._count(deadline, shard, now, NOT_DUE_IN_SHARD, HAS_OWNER)
        return QueueDepth(due=due, scheduled=not_due - with_owner, in_flight=with_owner)

    def _count(
        self, deadline: Deadline, shard: str, now: float, key_condition: str, item_filter: str | None = None
    ) -> tuple[int, int]:
        """(items matching the filter, items matching the key condition), all pages."""
        extra: dict[str, Any] = {"FilterExpression": item_filter} if item_filter else {}
        matched = scanned = 0
        while True:
            page = self._table.call(
                deadline, "query",
                IndexName=INDEX_NAME,
                KeyConditionExpression=key_condition,
                ExpressionAttributeNames=names(key_condition, item_filter or ""),
                ExpressionAttributeValues={":qshard": string(shard), ":now": epoch(now)},
                Select="COUNT",
                **extra,
            )
            matched += int(page.get("Count", 0))
            scanned += int(page.get("ScannedCount", 0))
            if "LastEvaluatedKey" not in page:
                return matched, scanned
            extra["ExclusiveStartKey"] = page["LastEvaluatedKey"]
