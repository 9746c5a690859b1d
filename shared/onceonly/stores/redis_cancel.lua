-- cancel: remove an item whatever its state.
-- KEYS[1]  {prefix}:{q:QUEUE}:sched
-- KEYS[2]  {prefix}:{q:QUEUE}:rec
-- ARGV[1]  item_id
-- Returns  1 if the item was there; 0 if not.
-- Race closed: a claim between removing the record and its schedule entry;
-- both change in one step.
local removed = redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
return removed
