"""Redis: a counting semaphore's sorted set expires with its last holder, so a
semaphore nobody uses any more leaves no key behind (docs/coordination.md,
"Counting semaphores"); a later take starts it again."""

from __future__ import annotations

import time
from urllib.parse import parse_qs, urlsplit

import redis

import onceonly


def test_the_semaphore_key_expires_with_its_last_holder(redis_url: str, unique: str) -> None:
    store = onceonly.connect(redis_url)
    client = redis.Redis.from_url(redis_url.split("?")[0])
    key = f"{parse_qs(urlsplit(redis_url).query)['prefix'][0]}:{{sem:{unique}}}"
    try:
        assert store.take_permit(unique, 2, ttl=0.3) is not None
        longer = store.take_permit(unique, 2, ttl=0.8)
        assert longer is not None
        time.sleep(0.5)
        assert client.zcard(key) == 2  # the first ended but nobody took since: still there, counting nothing
        time.sleep(0.5)
        assert client.exists(key) == 0
        assert store.take_permit(unique, 1, ttl=30) is not None
        assert store.take_permit(unique, 1, ttl=30) is None
    finally:
        client.close()
        store.close()
