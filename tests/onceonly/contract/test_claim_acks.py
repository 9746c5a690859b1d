"""claim(acks=...) when an acked claim's lease has run out but nobody took the
item yet: the holder's ack still counts (see the fencing rule), so the item is
removed, and neither handed out again nor counted against the claim's limit by
the same call. Run on every backend."""

from __future__ import annotations

import time

import onceonly


def test_an_ack_whose_lease_ran_out_removes_the_item_instead_of_granting_it(
    store: onceonly.Store, unique: str
) -> None:
    q = store.queue(unique)
    q.put("late")
    (late,) = q.claim(limit=1, lease=1.0)
    q.put("other")
    (other,) = q.claim(limit=1, lease=1.5)
    # "late"'s lease outlasts a put and a claim on a loaded machine: else the
    # second claim takes it again, and this test's ack is rightly refused.
    assert other.item_id == "other", "the first lease ran out before the second claim"
    time.sleep(1.6)  # both leases ran out, "late" first: both due again, held by nobody else
    batch = q.claim(limit=1, lease=30, acks=[late])
    assert batch.acked == [True]
    assert [(c.item_id, c.attempt) for c in batch] == [("other", other.attempt + 1)]
    assert q.depth() == onceonly.QueueDepth(due=0, scheduled=0, in_flight=1)
