-- cancel: remove items whatever their state.
-- KEYS[1]  {prefix}:{q:QUEUE}:sched
-- KEYS[2]  {prefix}:{q:QUEUE}:rec
-- ARGV     item_id, ... (one or more)
-- Returns  per item_id, in order: 1 if the item was there; 0 if not (an id
--          listed twice: 0 the second time).
-- Race closed: a claim between removing a record and its schedule entry;
-- both change in one step.
local removed = {}
for i, item_id in ipairs(ARGV) do
  removed[i] = redis.call('HDEL', KEYS[2], item_id)
  redis.call('ZREM', KEYS[1], item_id)
end
return removed
