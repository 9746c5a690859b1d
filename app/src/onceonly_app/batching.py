"""Splitting work into bounded requests: runs of messages under a count and a
byte limit (an SQS batch), and rounds of distinct keys (one statement cannot
change one row twice)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence


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
