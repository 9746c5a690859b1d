"""DynamoDB store: leases and due queues in one table, every grant ONE conditional
write. DynamoDB serialises writes to an item, so a condition checked and a value
set in the same UpdateItem cannot be interleaved by another writer.

Table (template.yaml's CoordinationTable; :meth:`DynamoDBStore.setup` creates it):
hash key ``pk`` (S), GSI ``due`` on ``qshard`` (S) + ``claimable_at`` (N),
projection ALL, PAY_PER_REQUEST.

- A lease is the item ``lease#NAME``: owner, token, busy_until, completed.
  Records are kept, so the token strictly increases across grants. Only a record
  completed with ``expire=True`` (one cron tick) carries ``expire_at``, the
  table's TTL attribute (epoch seconds, the end of its keep); DynamoDB deletes
  it some time after that, and a grant removes the attribute again.
- A queue item is ``q#QUEUE#ITEM_ID`` with ONE "claimable at" time, the sort key
  of the ``due`` GSI: its due time while waiting, its lease expiry while in flight.
  A crashed holder's item is claimable again once its lease runs out. The GSI's
  hash key ``qshard`` = ``QUEUE#k`` (k = crc32(item_id) % shards) spreads a busy
  queue over partitions; claim walks the shards from a random one.

Assumptions worth knowing:

- Clock. DynamoDB has no server clock, so times come from the client
  (``time.time()``, or the constructor's ``clock``). Two invocations agree on
  "now" only up to their clock skew, so leases must be much longer than that
  skew (docs/reliability.md measures the margin). Lambda hosts are NTP-synced,
  typically well under a second apart; a lease of seconds to minutes is safe.
  Fencing does not depend on clocks: every write checks owner AND token.
- Eventual consistency. GSI queries are eventually consistent: an item just put
  may take a moment to become claimable, and one just claimed may still be
  listed (its conditional claim write then fails, and it is skipped).
  depth() is an estimate for the same reason.
- Shards. Every process using a queue must use the same ``shards``: items in
  shards a reader does not walk are never claimed by it.
- Retries. botocore retries a request that timed out or failed (at most once,
  sized to the URL's ``timeout``). A conditional write whose condition fails on
  such a retry raises StoreUnavailableError instead of reporting contention
  when an earlier attempt may have been applied (no answer, or a 5xx) and its
  reply lost, so the grant may exist, held by nobody, until its lease runs
  out. After a throttle only (nothing applied) it is contention. Nothing is
  granted twice.
- One deadline per call. A call of many requests (claim, put_many, ack_many,
  depth) ends within the store's ``timeout`` as a whole: each request waits no
  longer than the time left, nothing is sent after the deadline, and the error
  says how many requests may have been applied (docs/coordination.md,
  "DynamoDB: one deadline per call"). put_many is the exception: each of its
  batches gets a deadline of its own, so a large one that keeps making
  progress finishes.

The modules, one job each (boto3 and botocore are imported only when a
``dynamodb://`` store is connected):

- ``store``: :class:`DynamoDBStore`, from a URL or your client; its leases
  are ``leases``'s, its counting semaphores ``semaphores``'s;
- ``queue``: :class:`DynamoDBQueue`, a due queue, given the store's table,
  clock and shards;
- ``options``: the URL's options, each checked; any other is refused;
- ``errors``: botocore's exceptions -> onceonly errors;
- ``table``: requests (translated by ``errors``), the pool, each call held to
  its deadline; ``deadline``: one deadline per call;
- ``batches``: many writes (transactions, item by item);
- ``expressions``: conditions and updates as named constants, keys;
- ``setup_table``: table, GSI, TTL.
"""

from .expressions import INDEX_NAME, LEASE_PREFIX, QUEUE_PREFIX, TTL_ATTRIBUTE
from .options import DEFAULT_SHARDS, MAX_SHARDS, URL_OPTIONS
from .queue import DynamoDBQueue
from .store import DynamoDBStore
from .table import MAX_CONCURRENT_WRITES

__all__ = [
    "DEFAULT_SHARDS",
    "INDEX_NAME",
    "LEASE_PREFIX",
    "MAX_CONCURRENT_WRITES",
    "MAX_SHARDS",
    "QUEUE_PREFIX",
    "TTL_ATTRIBUTE",
    "URL_OPTIONS",
    "DynamoDBQueue",
    "DynamoDBStore",
]
