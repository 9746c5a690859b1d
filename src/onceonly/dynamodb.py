"""The DynamoDB store, for building one around a boto3 client of your own
(``DynamoDBStore(client, table, timeout=10)``), and the table's layout facts
that tools reading the table need. Importing this module imports boto3 (the
``dynamodb`` extra); ``import onceonly`` does not.

- :data:`LEASE_PREFIX`, :data:`QUEUE_PREFIX`: how the hash key ``pk`` of a
  lease's item (``lease#NAME``) and of a queue item (``q#QUEUE#ITEM_ID``, the
  queue's name url-quoted) begin;
- :data:`MAX_CONCURRENT_WRITES`: requests one call sends at once (size a
  client's HTTP pool at twice that);
- :data:`TTL_ATTRIBUTE`: the table's TTL attribute (epoch seconds)."""

from __future__ import annotations

from .stores.dynamodb.expressions import LEASE_PREFIX, QUEUE_PREFIX, TTL_ATTRIBUTE
from .stores.dynamodb.queue import DynamoDBQueue
from .stores.dynamodb.store import DynamoDBStore
from .stores.dynamodb.table import MAX_CONCURRENT_WRITES

__all__ = ["LEASE_PREFIX", "MAX_CONCURRENT_WRITES", "QUEUE_PREFIX", "TTL_ATTRIBUTE", "DynamoDBQueue", "DynamoDBStore"]
