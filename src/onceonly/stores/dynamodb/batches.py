"""Many writes in one call (put_many, ack_many): in TransactWriteItems of up to
100, conditions kept, item by item where a transaction cannot take them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import partial
from typing import Any

from ...errors import OnceOnlyError
from .._common import batches
from .deadline import Deadline
from .table import MAX_CONCURRENT_WRITES, Table

# TransactWriteItems takes at most 100 writes, on distinct items, of at most
# 4 MB together; 100 payloads at the 256 KiB limit would be 25 MB. Sized by the
# request's JSON, with a margin for how DynamoDB counts.
MAX_TRANSACTION_ITEMS = 100
MAX_TRANSACTION_BYTES = 3_000_000
# A cancelled transaction is sent again once without the writes whose
# condition failed; writes still refused after that are sent one by one.
TRANSACTION_ROUNDS = 2
CONDITION_FAILED = "ConditionalCheckFailed"
_TRANSACTION_OPERATIONS = {"update_item": "Update", "delete_item": "Delete"}

Write = tuple[str, dict[str, Any]]  # (operation, parameters without TableName)


def write_all(
    table: Table, deadline: Deadline, writes: Sequence[Write], unfinished: str, *, deadline_per_batch: bool = False
) -> list[bool]:
    """Writes, conditions kept: whether each was applied (False: its condition
    failed).

    In TransactWriteItems of up to 100 writes: one API call per batch instead
    of one per item, at twice the write capacity per item. A transaction is all
    or nothing, so when it is cancelled it is sent once more without the
    writes whose condition failed (a stale ack). What is still refused after
    that (a conflict with a concurrent write), a second write of an item
    already in the transaction (a stale and a fresh claim of one item), and
    everything on a server without transactions (dynalite) is written item by
    item, concurrently. When a request fails or the deadline passes, no
    further batch is sent and StoreUnavailableError says how many writes were
    answered, may have been applied, or were not sent (``unfinished`` says
    what that leaves).

    ``deadline_per_batch``: each step after the first (a transaction, or a
    wave of up to MAX_CONCURRENT_WRITES writes item by item) gets a deadline
    of its own, as long as ``deadline``'s, so a call that keeps making
    progress never fails for being large (put_many); otherwise every step
    shares ``deadline`` (ack_many, and the acks of claim(acks=…), which the
    claim must not outwait)."""
    outcomes: list[bool | OnceOnlyError] = [table.cut_off(deadline, sent=False)] * len(writes)
    sizes = [len(json.dumps(params)) for _, params in writes]
    for number, batch in enumerate(batches(sizes, MAX_TRANSACTION_ITEMS, MAX_TRANSACTION_BYTES)):
        if number and deadline_per_batch:
            deadline = table.start(deadline.what)
        first_of_item = {writes[i][1]["Key"]["pk"]["S"]: i for i in reversed(batch)}
        try:
            transacted, refused = _transacted(table, deadline, writes, sorted(first_of_item.values()))
        except OnceOnlyError as exc:
            for i in batch:
                outcomes[i] = exc
            raise table.failure(deadline, outcomes, unfinished, "writes") from exc
        for i in batch:
            outcomes[i] = i in transacted  # a refused write is not applied: False
        one_by_one = [i for i in batch if i not in transacted and i not in refused]
        wave = MAX_CONCURRENT_WRITES if deadline_per_batch else max(1, len(one_by_one))
        for start in range(0, len(one_by_one), wave):
            if start and deadline_per_batch:
                deadline = table.start(deadline.what)
            indices = one_by_one[start:start + wave]
            results = table.run(deadline, [partial(_write_one, table, deadline, writes[i]) for i in indices])
            for i, result in zip(indices, results, strict=True):
                outcomes[i] = result
            if any(isinstance(result, OnceOnlyError) for result in results):
                raise table.failure(deadline, outcomes, unfinished, "writes")
    return [outcome is True for outcome in outcomes]


def _write_one(table: Table, deadline: Deadline, write: Write) -> bool:
    operation, params = write
    return table.send_conditional(deadline, operation, params) is not None


def _transacted(
    table: Table, deadline: Deadline, writes: Sequence[Write], indices: list[int]
) -> tuple[set[int], set[int]]:
    """Up to TRANSACTION_ROUNDS transactions of ``writes[indices]`` (distinct
    items): (the writes applied, the writes refused by their condition)."""
    pending, refused = indices, set[int]()
    for _ in range(TRANSACTION_ROUNDS):
        if not pending:
            break
        codes = table.transact(deadline, [_transaction_item(table, *writes[i]) for i in pending])
        if codes is True:
            return set(pending), refused
        if codes is None:  # not applied, nothing said why: item by item
            break
        refused |= {i for i, code in zip(pending, codes, strict=True) if code == CONDITION_FAILED}
        pending = [i for i in pending if i not in refused]
    return set(), refused


def _transaction_item(table: Table, operation: str, params: dict[str, Any]) -> dict[str, Any]:
    return {_TRANSACTION_OPERATIONS[operation]: {"TableName": table.name, **params}}
