"""Count the AWS API calls a boto3 client makes, by operation, with botocore's
own event hook: ``before-call`` fires once per API call (a call that botocore
retries is still one call; ``before-send`` would count the attempts).

    with ApiCalls(store_client) as calls:
        queue.ack_many(claims)
    calls.counts  # Counter({"TransactWriteItems": 1})
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import onceonly


class ApiCalls:
    def __init__(self, client: Any) -> None:
        self._events = client.meta.events
        self._event = f"before-call.{client.meta.service_model.service_id.hyphenize()}"
        self.counts: Counter[str] = Counter()

    def _count(self, model: Any, **_: Any) -> None:
        self.counts[model.name] += 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def reset(self) -> None:
        self.counts.clear()

    def __enter__(self) -> ApiCalls:
        self._events.register(self._event, self._count, unique_id=f"api-calls-{id(self)}")
        return self

    def __exit__(self, *_: object) -> None:
        self._events.unregister(self._event, unique_id=f"api-calls-{id(self)}")


def drain(queue: onceonly.Queue, batch: int = 25) -> int:
    """A worker loop: claim + ack_many until nothing is due. Returns the number
    of claim calls, the last (empty) one included."""
    calls = 1
    while claims := queue.claim(limit=batch, lease=60):
        calls += 1
        assert all(queue.ack_many(claims))
    return calls
